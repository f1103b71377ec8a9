// The Jupyter wire format: messages as zeromq multipart frames, signed with an HMAC.
// [routing ids..., "<IDS|MSG>", signature, header, parent_header, metadata, content, buffers...]
import * as crypto from "node:crypto";

export const PROTOCOL_VERSION = "5.3";
const DELIMITER = "<IDS|MSG>";

export interface Header {
  msg_id: string;
  session: string;
  username: string;
  date: string;
  msg_type: string;
  version: string;
}

export type Content = Record<string, unknown>;

export interface Message {
  /** Routing identities (shell, control, stdin) or the topic (iopub). */
  identities: Buffer[];
  header: Header;
  /** The request this message answers, or {} for none. */
  parent_header: Header | Record<string, never>;
  metadata: Content;
  content: Content;
  buffers: Buffer[];
}

export class WireError extends Error {
  override name = "WireError";
}

/** Signs and verifies messages with the connection file's key ("" disables signing, as the spec allows). */
export class Signer {
  private readonly algorithm: string;

  constructor(
    private readonly key: string,
    scheme: string,
  ) {
    const match = /^hmac-(.+)$/.exec(scheme);
    if (!match || !crypto.getHashes().includes(match[1])) {
      throw new WireError(`unsupported signature_scheme '${scheme}' (expected hmac-<hash>, e.g. hmac-sha256)`);
    }
    this.algorithm = match[1];
  }

  sign(parts: readonly Buffer[]): string {
    if (this.key === "") return "";
    const hmac = crypto.createHmac(this.algorithm, this.key);
    for (const p of parts) hmac.update(p);
    return hmac.digest("hex");
  }

  verify(signature: string, parts: readonly Buffer[]): boolean {
    if (this.key === "") return true;
    const expected = Buffer.from(this.sign(parts), "utf8");
    const given = Buffer.from(signature, "utf8");
    return given.length === expected.length && crypto.timingSafeEqual(given, expected);
  }
}

export function encode(message: Message, signer: Signer): Buffer[] {
  const parts = [message.header, message.parent_header, message.metadata, message.content].map((p) =>
    Buffer.from(JSON.stringify(p), "utf8"),
  );
  return [...message.identities, Buffer.from(DELIMITER), Buffer.from(signer.sign(parts)), ...parts, ...message.buffers];
}

function parseJson(frame: Buffer, what: string): Content {
  let value: unknown;
  try {
    value = JSON.parse(frame.toString("utf8"));
  } catch (e) {
    throw new WireError(`${what} is not JSON: ${(e as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new WireError(`${what} is not a JSON object`);
  return value as Content;
}

export function decode(frames: readonly Buffer[], signer: Signer): Message {
  const at = frames.findIndex((f) => f.length === DELIMITER.length && f.toString("utf8") === DELIMITER);
  if (at < 0) throw new WireError("no <IDS|MSG> delimiter");
  if (frames.length < at + 6) throw new WireError(`${frames.length - at - 1} frames after the delimiter, expected at least 5`);
  const signature = frames[at + 1].toString("utf8");
  const parts = frames.slice(at + 2, at + 6);
  if (!signer.verify(signature, parts)) throw new WireError("bad signature");
  const header = parseJson(parts[0], "header");
  if (typeof header.msg_type !== "string" || typeof header.msg_id !== "string") {
    throw new WireError("header lacks msg_type or msg_id");
  }
  return {
    identities: frames.slice(0, at),
    header: header as unknown as Header,
    parent_header: parseJson(parts[1], "parent_header") as Message["parent_header"],
    metadata: parseJson(parts[2], "metadata"),
    content: parseJson(parts[3], "content"),
    buffers: frames.slice(at + 6),
  };
}

/** Builds outgoing messages for one kernel session. */
export class MessageFactory {
  readonly session = crypto.randomUUID();

  constructor(private readonly username = "moelens") {}

  make(
    msgType: string,
    content: Content,
    parent: Message | undefined,
    options: { identities?: Buffer[]; metadata?: Content } = {},
  ): Message {
    return {
      identities: options.identities ?? [],
      header: {
        msg_id: crypto.randomUUID(),
        session: this.session,
        username: this.username,
        date: new Date().toISOString(),
        msg_type: msgType,
        version: PROTOCOL_VERSION,
      },
      parent_header: parent ? parent.header : {},
      metadata: options.metadata ?? {},
      content,
      buffers: [],
    };
  }

  /** A reply to `request` on the same router socket: same identities, `<type>_reply`. */
  reply(request: Message, content: Content, metadata: Content = {}): Message {
    const replyType = request.header.msg_type.replace(/_request$/, "_reply");
    return this.make(replyType, content, request, { identities: request.identities, metadata });
  }
}
