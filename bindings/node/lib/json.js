// JSON crosses the addon's boundary as text: what goes to the addon is `toJson`'s, what
// comes back is read with `JSON.parse`. So values are what JavaScript's own JSON makes of
// them, as over the TypeScript SDK's transport: a whole number is sent as an integer however
// large, a server's integer beyond 2^53 arrives as the nearest number (never a BigInt that
// JSON.stringify could not write again), and a message of any number of values crosses.
import { randomUUID } from "node:crypto";

/**
 * `value` as JSON text, as `JSON.stringify` writes it (undefined for undefined), except that
 * a BigInt is written as the integer it is rather than refused.
 * @param {unknown} value
 * @returns {string | undefined}
 */
export function toJson(value) {
  try {
    return JSON.stringify(value);
  } catch (error) {
    if (!(error instanceof TypeError) || !/BigInt/.test(error.message)) throw error;
  }
  // Each BigInt is written as a string naming it under a tag no other string holds, and the
  // string then replaced by its digits.
  const tag = `bigint-${randomUUID()}:`;
  const text = JSON.stringify(value, (_key, v) => (typeof v === "bigint" ? `${tag}${v}` : v));
  return text.replace(new RegExp(`"${tag}(-?\\d+)"`, "g"), "$1");
}

/**
 * The options of a client or bridge as the addon takes them: `capabilities` as JSON text.
 * @param {Record<string, any>} options
 */
export function nativeOptions(options) {
  return options.capabilities === undefined || options.capabilities === null
    ? options
    : { ...options, capabilities: toJson(options.capabilities) };
}

/** The JSON text of a promise's value, read. */
export const parsed = (promise) => promise.then(JSON.parse);
