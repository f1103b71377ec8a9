// The kernel's command line: run it on a connection file, or install/uninstall its kernelspec.
// `npx moelens kernel ...` forwards here.
import { readConnectionFile } from "./connection";
import { TYPECHECK_MODES, type TypeCheckMode } from "./executor";
import { installKernel, uninstallKernel, type InstallOptions } from "./install";
import { Kernel } from "./kernel";

export const KERNEL_USAGE = `Usage (\`node dist/kernel/main.js\` takes the same arguments):
  moelens kernel install [--user | --sys-prefix | --prefix DIR] [--name NAME] [--display-name TEXT] [--jupyter PATH]
      Write the Jupyter kernelspec "moelens" (default: --user, the user's Jupyter data folder).
      --sys-prefix: the prefix of the Python that runs jupyter (/usr for Debian's /usr/bin/jupyter).
      --prefix DIR: DIR/share/jupyter (add it to JUPYTER_PATH if it is not jupyter's own prefix).
  moelens kernel uninstall [--user | --sys-prefix | --prefix DIR] [--name NAME] [--jupyter PATH]
      Remove that kernelspec.
  moelens kernel run CONNECTION_FILE
      Run the kernel (Jupyter does this, as \`node dist/kernel/main.js CONNECTION_FILE\`).

Environment for the kernel:
  MOELENS_KERNEL_TYPECHECK=warn|block|off   type errors: shown before the output (default),
                                            stop the cell, or not checked.
`;

function parseInstallArgs(args: string[]): InstallOptions {
  const options: InstallOptions = {};
  for (let i = 0; i < args.length; i++) {
    const value = () => {
      const v = args[++i];
      if (v === undefined || v.startsWith("--")) throw new Error(`${args[i - 1]} needs a value`);
      return v;
    };
    switch (args[i]) {
      case "--user":
        options.user = true;
        break;
      case "--sys-prefix":
        options.sysPrefix = true;
        break;
      case "--prefix":
        options.prefix = value();
        break;
      case "--name":
        options.name = value();
        break;
      case "--display-name":
        options.displayName = value();
        break;
      case "--jupyter":
        options.jupyter = value();
        break;
      default:
        throw new Error(`unknown option '${args[i]}'`);
    }
  }
  return options;
}

function typecheckMode(): TypeCheckMode {
  const mode = process.env.MOELENS_KERNEL_TYPECHECK ?? "warn";
  if (!(TYPECHECK_MODES as readonly string[]).includes(mode)) {
    throw new Error(`MOELENS_KERNEL_TYPECHECK='${mode}': expected one of ${TYPECHECK_MODES.join(", ")}`);
  }
  return mode as TypeCheckMode;
}

async function runKernel(connectionFile: string): Promise<never> {
  const kernel = await Kernel.start(readConnectionFile(connectionFile), { typecheck: typecheckMode() });
  process.on("SIGTERM", () => void kernel.close());
  await kernel.closed;
  // Timers or servers a cell left running must not keep a shut-down kernel alive.
  process.exit(0);
}

/** Runs `kernel <args>`; returns the exit status. Errors are printed with the usage. */
export async function kernelCommand(args: string[]): Promise<number> {
  const [command, ...rest] = args;
  try {
    switch (command) {
      case undefined:
      case "-h":
      case "--help":
      case "help":
        process.stdout.write(KERNEL_USAGE);
        return command === undefined ? 2 : 0;
      case "install": {
        const options = parseInstallArgs(rest);
        console.log(`installed the kernelspec in ${installKernel(options)}`);
        return 0;
      }
      case "uninstall": {
        const { displayName, ...location } = parseInstallArgs(rest);
        if (displayName !== undefined) throw new Error("uninstall takes no --display-name");
        const removed = uninstallKernel(location);
        console.log(removed ? `removed ${removed}` : "no moelens kernelspec there");
        return 0;
      }
      case "run":
        if (rest.length !== 1) throw new Error("run needs exactly one connection file");
        return await runKernel(rest[0]);
      default:
        if (rest.length > 0 || command.startsWith("-")) throw new Error(`unknown command '${args.join(" ")}'`);
        return await runKernel(command);
    }
  } catch (e) {
    process.stderr.write(`moelens kernel: ${(e as Error).message}\n\n${KERNEL_USAGE}`);
    return 2;
  }
}
