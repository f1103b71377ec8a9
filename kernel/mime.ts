// The display protocol: a value renders with the MIME bundle its `toMimeBundle()` returns, else as text.
import * as util from "node:util";

/** MIME type -> data: a string, or a JSON value for JSON types (application/json, ...+json). */
export type MimeBundle = Record<string, unknown>;

export interface HasMimeBundle {
  toMimeBundle(): MimeBundle;
}

function hasMimeBundle(value: unknown): value is HasMimeBundle {
  return (
    (typeof value === "object" || typeof value === "function") &&
    value !== null &&
    typeof (value as Partial<HasMimeBundle>).toMimeBundle === "function"
  );
}

const isJsonMime = (mime: string) => mime === "application/json" || mime.endsWith("+json");

/** Plain-text form of any value, as Node's REPL shows it. */
export function plainText(value: unknown): string {
  if (typeof value === "string") return util.inspect(value);
  return util.inspect(value, { depth: 4, maxArrayLength: 64, maxStringLength: 10_000, breakLength: 100 });
}

/**
 * The bundle sent for `value`. Binary data (Uint8Array) is base64-encoded, as Jupyter expects for
 * images; a text/plain fallback is added when the bundle lacks one.
 */
export function toMimeBundle(value: unknown): MimeBundle {
  if (!hasMimeBundle(value)) return { "text/plain": plainText(value) };
  const raw: unknown = value.toMimeBundle();
  const owner = value.constructor?.name ?? "value";
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new TypeError(`${owner}.toMimeBundle() must return an object of MIME type -> data, got ${plainText(raw)}`);
  }
  const bundle: MimeBundle = {};
  for (const [mime, data] of Object.entries(raw)) {
    if (!/^[\w\-+.]+\/[\w\-+.]+$/.test(mime)) throw new TypeError(`${owner}.toMimeBundle(): '${mime}' is not a MIME type`);
    if (typeof data === "string" || isJsonMime(mime)) bundle[mime] = data;
    else if (data instanceof Uint8Array) bundle[mime] = Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64");
    else throw new TypeError(`${owner}.toMimeBundle(): data for '${mime}' must be a string or a Uint8Array, got ${typeof data}`);
  }
  // Frontends that render none of the rich types show this; the class name says what it was.
  if (!("text/plain" in bundle)) bundle["text/plain"] = `<${owner}>`;
  return bundle;
}
