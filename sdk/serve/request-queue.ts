// The bounded queue in front of the engine: one request holds the engine at a time, at most
// `maxWaiting` more wait for it in arrival order, and the next one is refused with a 503 whose
// Retry-After estimates the wait. A waiting request whose client goes away leaves the queue.
import { ApiError } from "./api-error";

/** A request's place: `ready` resolves when it holds the engine; `release()` gives the place up (idempotent). */
export interface QueuePlace {
  readonly ready: Promise<void>;
  release(): void;
}

interface Waiter {
  grant(): void;
}

export class RequestQueue {
  private holder: object | undefined;
  private readonly waiting: Waiter[] = [];
  // Moving average of how long a request holds the engine, for Retry-After.
  private averageHoldMs = 1000;

  constructor(readonly maxWaiting: number) {
    if (!Number.isInteger(maxWaiting) || maxWaiting < 0) throw new RangeError(`maxWaiting must be an integer >= 0, got ${maxWaiting}`);
  }

  get running(): number {
    return this.holder ? 1 : 0;
  }

  get queued(): number {
    return this.waiting.length;
  }

  /**
   * Takes a place, or throws a 503 ApiError when the queue is full. `signal` aborting while the
   * request waits removes it from the queue and rejects `ready` with the signal's reason.
   */
  reserve(signal?: AbortSignal): QueuePlace {
    if (this.holder && this.waiting.length >= this.maxWaiting) {
      const seconds = Math.max(1, Math.ceil((this.averageHoldMs * (this.waiting.length + 1)) / 1000));
      throw new ApiError(
        503,
        `the server is busy: ${this.waiting.length} requests are waiting for the model (the limit); retry later`,
        "server_error",
        "queue_full",
        null,
        { "Retry-After": String(seconds) },
      );
    }
    const token = {};
    let state: "waiting" | "holding" | "released" = "waiting";
    let started = 0;
    let resolve!: () => void;
    let reject!: (reason: unknown) => void;
    const ready = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
    ready.catch(() => undefined); // the owner may release without awaiting
    const waiter: Waiter = {
      grant: () => {
        state = "holding";
        started = performance.now();
        this.holder = token;
        signal?.removeEventListener("abort", onAbort);
        resolve();
      },
    };
    const release = () => {
      if (state === "released") return;
      signal?.removeEventListener("abort", onAbort);
      if (state === "holding") {
        this.averageHoldMs = 0.8 * this.averageHoldMs + 0.2 * (performance.now() - started);
        this.holder = undefined;
        this.waiting.shift()?.grant();
      } else {
        this.waiting.splice(this.waiting.indexOf(waiter), 1);
      }
      state = "released";
    };
    const onAbort = () => {
      if (state !== "waiting") return;
      release();
      reject(signal?.reason);
    };
    if (this.holder) {
      this.waiting.push(waiter);
      if (signal?.aborted) onAbort();
      else signal?.addEventListener("abort", onAbort, { once: true });
    } else {
      waiter.grant();
    }
    return { ready, release };
  }
}
