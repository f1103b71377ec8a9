// The kernel's wire format, its per-socket writer and the iopub coalescing, without zeromq.
import { describe, expect, test } from "vitest";
import { parseConnectionInfo, endpoint } from "../../kernel/connection";
import { History } from "../../kernel/history";
import { Iopub } from "../../kernel/iopub";
import { SocketWriter } from "../../kernel/socket-writer";
import { decode, encode, MessageFactory, Signer, type Message } from "../../kernel/wire";

const signer = new Signer("secret", "hmac-sha256");
const factory = new MessageFactory();

test("zeromq's prebuilt addon loads (npm install needs no build and no install script)", async () => {
  const zmq = await import("zeromq");
  expect(zmq.version).toMatch(/^4\.3\./);
  const socket = new zmq.Router();
  socket.close();
});

describe("wire", () => {
  test("round-trips a signed message with routing identities and buffers", () => {
    const m = factory.make("execute_request", { code: "1 + 1" }, undefined, { identities: [Buffer.from("client-1")] });
    m.buffers = [Buffer.from([1, 2, 3])];
    const frames = encode(m, signer);
    expect(frames[1].toString()).toBe("<IDS|MSG>");
    // The signature is the HMAC-SHA256 of header, parent, metadata and content, in hex.
    expect(frames[2].toString()).toMatch(/^[0-9a-f]{64}$/);
    const back = decode(frames, signer);
    expect(back.identities.map(String)).toEqual(["client-1"]);
    expect(back.header).toEqual(m.header);
    expect(back.content).toEqual({ code: "1 + 1" });
    expect(back.buffers.map((b) => [...b])).toEqual([[1, 2, 3]]);
  });

  test("rejects a tampered or wrongly keyed message", () => {
    const frames = encode(factory.make("kernel_info_request", {}, undefined), signer);
    const tampered = [...frames];
    tampered[5] = Buffer.from('{"code":"evil"}');
    expect(() => decode(tampered, signer)).toThrow(/bad signature/);
    expect(() => decode(frames, new Signer("other", "hmac-sha256"))).toThrow(/bad signature/);
    expect(() => decode(frames.slice(0, 4), signer)).toThrow(/frames after the delimiter/);
  });

  test("an empty key disables signing, as the spec allows", () => {
    const unsigned = new Signer("", "hmac-sha256");
    const frames = encode(factory.make("kernel_info_request", {}, undefined), unsigned);
    expect(frames[1].toString()).toBe("");
    expect(decode(frames, unsigned).header.msg_type).toBe("kernel_info_request");
  });

  test("a reply goes back to the request's identities with the _reply type and parent", () => {
    const request = factory.make("complete_request", {}, undefined, { identities: [Buffer.from("peer")] });
    const reply = factory.reply(request, { status: "ok" });
    expect(reply.header.msg_type).toBe("complete_reply");
    expect(reply.parent_header).toEqual(request.header);
    expect(reply.identities.map(String)).toEqual(["peer"]);
  });

  test("connection files: defaults, endpoints and errors naming the field", () => {
    const ports = { shell_port: 1, iopub_port: 2, stdin_port: 3, control_port: 4, hb_port: 5 };
    const info = parseConnectionInfo({ ...ports, key: "k" }, "c.json");
    expect(endpoint(info, "iopub")).toBe("tcp://127.0.0.1:2");
    expect(endpoint({ ...info, transport: "ipc", ip: "/tmp/k" }, "hb")).toBe("ipc:///tmp/k-5");
    expect(() => parseConnectionInfo({ ...ports, hb_port: "x" }, "c.json")).toThrow("c.json: field 'hb_port' must be a number");
    expect(() => new Signer("k", "hmac-nope")).toThrow(/signature_scheme/);
  });
});

// A socket whose sends complete when the test says so, and that fails on overlapping sends as zeromq v6 does.
class SlowSocket {
  sent: Message[] = [];
  inFlight = false;
  release: (() => void)[] = [];
  async send(frames: Buffer[]): Promise<void> {
    if (this.inFlight) throw new Error("EBUSY: a send is already in flight");
    this.inFlight = true;
    await new Promise<void>((r) => this.release.push(r));
    this.inFlight = false;
    this.sent.push(decode(frames, signer));
  }
  async releaseAll(): Promise<void> {
    while (this.release.length > 0 || this.inFlight) {
      this.release.shift()?.();
      await new Promise((r) => setImmediate(r));
    }
  }
}

describe("socket writer and iopub", () => {
  test("sends one message at a time, in order, however fast they are queued", async () => {
    const socket = new SlowSocket();
    const errors: unknown[] = [];
    const writer = new SocketWriter(socket, signer, (e) => errors.push(e));
    for (let i = 0; i < 2000; i++) writer.enqueue(factory.make("stream", { i }, undefined));
    await socket.releaseAll();
    await writer.drain();
    expect(errors).toEqual([]);
    expect(socket.sent.map((m) => m.content.i)).toEqual([...Array(2000).keys()]);
  });

  test("coalesces stream text, flushes it before other outputs, and keeps the latest display update", async () => {
    const socket = new SlowSocket();
    const iopub = new Iopub(new SocketWriter(socket, signer, (e) => { throw e; }), factory);
    const parent = factory.make("execute_request", {}, undefined);
    for (let i = 0; i < 10_000; i++) iopub.stream("stdout", `${i}\n`, parent);
    iopub.stream("stderr", "warning\n", parent);
    iopub.publish("display_data", { data: { "text/plain": "d" }, metadata: {}, transient: { display_id: "x" } }, parent);
    for (let i = 0; i < 1000; i++) {
      iopub.updateDisplay({ data: { "text/plain": `v${i}` }, metadata: {}, transient: { display_id: "x" } }, parent);
    }
    iopub.stream("stdout", "after\n", parent);
    iopub.status("idle", parent);
    const drained = iopub.drain();
    await socket.releaseAll();
    await drained;
    const summary = socket.sent.map((m) => `${m.header.msg_type}:${m.content.name ?? ""}`);
    // 10,000 lines in 64 KiB messages; the stderr line after them; the display, then only the latest
    // queued update; the text written after it; idle last.
    expect(summary[summary.length - 1]).toBe("status:");
    const stdout = socket.sent.filter((m) => m.content.name === "stdout").map((m) => m.content.text).join("");
    expect(stdout).toBe([...Array(10_000).keys()].map((i) => `${i}\n`).join("") + "after\n");
    expect(summary.length).toBeLessThan(10);
    const updates = socket.sent.filter((m) => m.header.msg_type === "update_display_data");
    expect(updates.map((m) => (m.content.data as Record<string, string>)["text/plain"])).toEqual(["v999"]);
    const order = summary.filter((s, i) => s !== summary[i - 1]);
    expect(order).toEqual(["stream:stdout", "stream:stderr", "display_data:", "update_display_data:", "stream:stdout", "status:"]);
  });

  test("stream text is sent within ~30 ms without any other output", async () => {
    const sent: Message[] = [];
    const iopub = new Iopub(new SocketWriter({ send: async (f) => void sent.push(decode(f, signer)) }, signer, () => {}), factory);
    iopub.stream("stdout", "tick\n", undefined);
    expect(sent).toEqual([]);
    await new Promise((r) => setTimeout(r, 80));
    expect(sent.map((m) => m.content.text)).toEqual(["tick\n"]);
  });
});

describe("history", () => {
  const h = new History();
  ["1 + 2", "x = 1", "1 + 2", "1 + 3"].forEach((code, i) => h.add(i + 1, code, `${i}`));

  test("tail, range and glob search, with outputs on request", () => {
    expect(h.query({ hist_access_type: "tail", n: 2 })).toEqual([[1, 3, "1 + 2"], [1, 4, "1 + 3"]]);
    expect(h.query({ hist_access_type: "range", session: 1, start: 2, stop: 3, output: true })).toEqual([[1, 2, ["x = 1", "1"]]]);
    expect(h.query({ hist_access_type: "range", session: 7, start: 1 })).toEqual([]);
    expect(h.query({ hist_access_type: "search", pattern: "1 + *" }).map((e) => e[1])).toEqual([1, 3, 4]);
    expect(h.query({ hist_access_type: "search", pattern: "1 + ?", unique: true }).map((e) => e[1])).toEqual([3, 4]);
    expect(h.query({ hist_access_type: "search", pattern: "1*", n: 1 }).map((e) => e[1])).toEqual([4]);
  });
});
