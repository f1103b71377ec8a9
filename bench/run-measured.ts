// Runs a benchmark child process and follows its peak resident memory (VmHWM, Linux /proc), polled
// while it runs: the high-water mark only grows, so the last reading before exit is the peak.
import { spawn } from "node:child_process";
import * as fs from "node:fs";

export interface MeasuredRun {
  stdout: string;
  stderr: string;
  peakRssBytes: number | null; // null where /proc is unavailable
  seconds: number;
}

function highWaterMark(pid: number): number | null {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

export function runMeasured(command: string, args: string[], options: { timeoutSeconds: number; cwd?: string }): Promise<MeasuredRun> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], cwd: options.cwd });
    let stdout = "", stderr = "", peak: number | null = null;
    child.stdout.on("data", (d: Buffer) => (stdout += d));
    child.stderr.on("data", (d: Buffer) => (stderr += d));
    const poll = setInterval(() => {
      const hwm = child.pid ? highWaterMark(child.pid) : null;
      if (hwm !== null) peak = Math.max(peak ?? 0, hwm);
    }, 200);
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutSeconds * 1000);
    child.on("error", (e) => {
      clearInterval(poll);
      clearTimeout(timer);
      reject(new Error(`${command}: ${e.message}`));
    });
    child.on("close", (code, signal) => {
      clearInterval(poll);
      clearTimeout(timer);
      if (code !== 0) {
        const why = signal ? `killed by ${signal}${signal === "SIGKILL" ? ` (timeout ${options.timeoutSeconds} s?)` : ""}` : `exit code ${code}`;
        reject(new Error(`${command} ${args.join(" ")}: ${why}\n${stderr.slice(-2000)}`));
        return;
      }
      resolve({ stdout, stderr, peakRssBytes: peak, seconds: (performance.now() - started) / 1000 });
    });
  });
}
