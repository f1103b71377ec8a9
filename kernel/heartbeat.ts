// The heartbeat channel echoes pings. It runs in a worker thread so a cell that blocks the main
// thread (a long synchronous loop or native call) does not make clients think the kernel died.
// The same thread ends the kernel when the process that started it is gone (as ipykernel does):
// a kernel stuck in a loop would otherwise keep a core busy forever.
import { Worker } from "node:worker_threads";

// Runs in the worker: bind a Reply socket, echo every message, close on request; watch the parent.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const zmq = require(workerData.zeromq);
const socket = new zmq.Reply();
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) process.kill(process.pid, "SIGKILL");
}, 1000).unref();
parentPort.on("message", (m) => {
  if (m !== "close") return;
  socket.close();
  Atomics.store(workerData.closed, 0, 1);
  Atomics.notify(workerData.closed, 0);
  parentPort.close();
});
(async () => {
  try {
    await socket.bind(workerData.endpoint);
    parentPort.postMessage("bound");
  } catch (e) {
    parentPort.postMessage("error: " + e.message);
    return;
  }
  try {
    for await (const frames of socket) await socket.send(frames);
  } catch (e) {
    if (!socket.closed) throw e;
  }
})();
`;

export class Heartbeat {
  private readonly closed = new Int32Array(new SharedArrayBuffer(4));
  private readonly worker: Worker;

  private constructor(endpoint: string) {
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { endpoint, zeromq: require.resolve("zeromq"), closed: this.closed },
    });
    this.worker.unref();
  }

  static start(endpoint: string): Promise<Heartbeat> {
    const hb = new Heartbeat(endpoint);
    return new Promise((resolve, reject) => {
      hb.worker.once("message", (m: string) =>
        m === "bound" ? resolve(hb) : reject(new Error(`heartbeat on ${endpoint}: ${m}`)),
      );
      hb.worker.once("error", reject);
    });
  }

  /**
   * Closes the socket, waiting synchronously (at most 1 s) so it also works from process.on("exit"):
   * a zeromq socket still open in a worker when the process exits aborts the process.
   */
  closeSync(): void {
    if (Atomics.load(this.closed, 0) === 1) return;
    this.worker.postMessage("close");
    Atomics.wait(this.closed, 0, 0, 1000);
  }
}
