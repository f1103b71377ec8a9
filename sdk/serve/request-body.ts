// Reads a request's JSON body: at most `limit` bytes (413 past it, before reading a body whose
// Content-Length already says so), strict UTF-8 (400 on invalid bytes), then JSON (400 when malformed).
import type { IncomingMessage } from "node:http";
import { ApiError, badRequest } from "./api-error";

export function tooLarge(limit: number): ApiError {
  return new ApiError(413, `the request body is larger than the server's limit of ${limit} bytes`, "invalid_request_error", "request_too_large");
}

export async function readJsonBody(req: IncomingMessage, limit: number): Promise<unknown> {
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > limit) throw tooLarge(limit);
  const parts: Buffer[] = [];
  let size = 0;
  for await (const part of req as AsyncIterable<Buffer>) {
    size += part.length;
    if (size > limit) throw tooLarge(limit);
    parts.push(part);
  }
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
