// Loading a checkpoint directory and opening sessions on it.
import * as fs from "node:fs";
import * as path from "node:path";
import type { ModelConfig } from "./config";
import { native, packageRoot, type NativeInfo, type NativeModel } from "./native";
import { Session } from "./session";

export type BackendName = "cpu";

export interface LoadOptions {
  /** Compute backend (default "cpu"). */
  backend?: BackendName;
  /** CPU threads (default: all cores). */
  threads?: number;
  /** Called as layers are placed on the backend. */
  onProgress?: (done: number, total: number) => void;
}

/** The directory of the small model that ships with the package. */
export const embeddedModelDir = path.join(packageRoot, "models", "moelens-tiny");

export class Model {
  readonly config: ModelConfig;
  readonly info: NativeInfo;

  /** @internal */
  constructor(
    private readonly native: NativeModel,
    readonly dir: string,
  ) {
    this.config = native.config();
    this.info = native.info();
  }

  /** A new, empty session (position 0). */
  session(): Session {
    return new Session(this.native.session(), { config: this.config, native: this.native });
  }

  /** Releases the weights now rather than at garbage collection; open sessions keep them until they go. */
  dispose(): void {
    this.native.dispose();
  }
}

/** Loads a checkpoint directory (HF or mlx-community layout); default: the embedded model. */
export async function load(dir: string = embeddedModelDir, options: LoadOptions = {}): Promise<Model> {
  const resolved = path.resolve(dir);
  if (!fs.existsSync(resolved) || !fs.statSync(resolved).isDirectory()) {
    throw new Error(`${resolved}: not a model directory`);
  }
  const backend = options.backend ?? "cpu";
  const nativeModel = await native().loadModel(
    resolved,
    { backend, threads: options.threads ?? 0 },
    options.onProgress,
  );
  return new Model(nativeModel, resolved);
}
