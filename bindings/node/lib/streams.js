// A native stream (events or notifications) as an async iterator of the items it gives as
// JSON text. It ends when the client is closed, or when `signal` aborts (a pending `next()`
// included).
import { CancelToken } from "./native.js";

/**
 * `for await (const item of iterate(stream, { signal }))`.
 * @param {import("../native.d.ts").NativeStream} stream
 * @param {{ signal?: AbortSignal }} [options]
 */
export async function* iterate(stream, { signal } = {}) {
  const token = new CancelToken();
  const abort = () => token.cancel();
  signal?.addEventListener("abort", abort, { once: true });
  if (signal?.aborted) token.cancel();
  try {
    for (;;) {
      const item = await stream.next(token);
      if (item === null || item === undefined) return;
      yield JSON.parse(item);
    }
  } finally {
    // The iterator was left (break, return, throw): its pending wait is not needed.
    token.cancel();
    signal?.removeEventListener("abort", abort);
  }
}
