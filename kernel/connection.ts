// The connection file Jupyter hands the kernel: transport, ports and signing key.
import * as fs from "node:fs";

export type Channel = "shell" | "control" | "stdin" | "iopub" | "hb";
const CHANNELS: readonly Channel[] = ["shell", "control", "stdin", "iopub", "hb"];

export interface ConnectionInfo {
  transport: "tcp" | "ipc";
  ip: string;
  ports: Record<Channel, number>;
  key: string;
  signatureScheme: string;
}

export function parseConnectionInfo(json: unknown, source: string): ConnectionInfo {
  if (typeof json !== "object" || json === null) throw new Error(`${source}: not a JSON object`);
  const c = json as Record<string, unknown>;
  const field = <T>(name: string, type: string, fallback?: T): T => {
    const v = c[name] ?? fallback;
    if (typeof v !== type) throw new Error(`${source}: field '${name}' must be a ${type}, got ${JSON.stringify(c[name])}`);
    return v as T;
  };
  const transport = field<string>("transport", "string", "tcp");
  if (transport !== "tcp" && transport !== "ipc") throw new Error(`${source}: field 'transport' must be "tcp" or "ipc", got "${transport}"`);
  const ports = {} as Record<Channel, number>;
  for (const ch of CHANNELS) {
    const port = field<number>(`${ch}_port`, "number");
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`${source}: field '${ch}_port' is not a port: ${port}`);
    ports[ch] = port;
  }
  return {
    transport,
    ip: field<string>("ip", "string", "127.0.0.1"),
    ports,
    key: field<string>("key", "string", ""),
    signatureScheme: field<string>("signature_scheme", "string", "hmac-sha256"),
  };
}

export function readConnectionFile(file: string): ConnectionInfo {
  let json: unknown;
  try {
    json = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (e) {
    throw new Error(`cannot read the connection file ${file}: ${(e as Error).message}`);
  }
  return parseConnectionInfo(json, file);
}

/** The zeromq endpoint of one channel (ipc endpoints are "<ip>-<port>" paths, as jupyter_client makes them). */
export function endpoint(info: ConnectionInfo, channel: Channel): string {
  const port = info.ports[channel];
  return info.transport === "tcp" ? `tcp://${info.ip}:${port}` : `ipc://${info.ip}-${port}`;
}
