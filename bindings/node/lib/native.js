// Loads the addon (built by `npm run build`: mcp-resume.node) and registers how it makes
// errors.
import { createRequire } from "node:module";
import { fromNative } from "./errors.js";

const native = load();
function load() {
  try {
    return createRequire(import.meta.url)("../mcp-resume.node");
  } catch (error) {
    throw new Error("cannot load the mcp-resume addon (mcp-resume.node): build it with `node build.mjs` in bindings/node", { cause: error });
  }
}
// The factory gets the error's details as JSON text, as all JSON crossing the boundary.
native.setErrorFactory((details) => fromNative(JSON.parse(details)));

export const { NativeClient, NativeBridge, CancelToken, NativeGuard, NativeStep } = native;
export const bridgeConstants = native.bridgeConstants();
