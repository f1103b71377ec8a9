// Reads a request's JSON body: at most `limit` bytes (413 past it, found while the body streams in, or
// before reading a body whose Content-Length already says so), strict UTF-8 (400 on invalid bytes),
// then JSON (400 when malformed).
import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import { ApiError, badRequest } from "./api-error";

export function tooLarge(limit: number): ApiError {
  return new ApiError(413, `the request body is larger than the server's limit of ${limit} bytes`, "invalid_request_error", "request_too_large");
}

/**
 * The body as JSON. Over `limit` bytes it rejects with a 413 at once, keeps nothing of the body, and
 * reads the rest to discard it (see lingerAfterTooLarge), so the answer reaches the client intact.
 */
export async function readJsonBody(req: IncomingMessage, limit: number): Promise<unknown> {
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    throw tooLarge(limit);
  }
  const parts: Buffer[] = [];
  await new Promise<void>((resolve, reject) => {
    let size = 0;
    const onData = (part: Buffer) => {
      size += part.length;
      if (size <= limit) return void parts.push(part);
      parts.length = 0;
      req.off("data", onData);
      req.resume(); // flowing with no 'data' listener: the rest is read and dropped
      reject(tooLarge(limit));
    };
    req.on("data", onData);
    req.once("end", resolve);
    req.once("error", reject);
    req.once("aborted", () => reject(new Error("the client closed the connection while sending the body")));
  });
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(parts));
  } catch {
    throw badRequest("the request body is not valid UTF-8", "invalid_encoding");
  }
  if (text.trim() === "") throw badRequest("the request body is empty; send a JSON object", "invalid_json");
  try {
    return JSON.parse(text);
  } catch (e) {
    throw badRequest(`the request body is not valid JSON: ${(e as Error).message}`, "invalid_json");
  }
}

const lingering = new WeakSet<Socket>();

/** True while a connection drops the rest of a refused body: its request was answered already. */
export function isLingering(socket: Socket): boolean {
  return lingering.has(socket);
}

/** How long the rest of a refused body is read before the connection is closed. */
export const LINGER_MS = 2000;

/**
 * After a 413: closing a socket that still has unread bytes makes the kernel reset the connection,
 * which can destroy the answer before the client reads it. So the rest of the body is read and
 * dropped (as HTTP servers' "lingering close" does) until it ends or LINGER_MS pass, then the
 * connection closes.
 */
export function lingerAfterTooLarge(req: IncomingMessage): void {
  const socket = req.socket;
  lingering.add(socket);
  if (req.complete) return void socket.end();
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  req.once("end", () => {
    clearTimeout(timer);
    socket.end();
  });
  socket.once("close", () => clearTimeout(timer));
}
