// An AbortSignal reaching a call of the addon: the call gets a CancelToken, cancelled on
// abort, which drops the Rust SDK's future (the server is told, nothing is resumed or re-sent
// after). The promise rejects with the signal's reason, as fetch does.
import { CancelToken } from "./native.js";

/** `start(token)`'s promise, bound to `signal` (none: `start(undefined)`). */
export async function withSignal(signal, start) {
  if (signal === undefined || signal === null) return start(undefined);
  signal.throwIfAborted();
  const token = new CancelToken();
  const abort = () => token.cancel();
  signal.addEventListener("abort", abort, { once: true });
  try {
    return await start(token);
  } catch (error) {
    throw signal.aborted ? signal.reason : error;
  } finally {
    signal.removeEventListener("abort", abort);
  }
}
