// Loads the addon (built by `npm run build`: mcp-resume.node) and registers how it makes
// errors.
import { createRequire } from "node:module";
import { fromNative } from "./errors.js";

const native = createRequire(import.meta.url)("../mcp-resume.node");
native.setErrorFactory(fromNative);

export const { NativeClient, NativeBridge, CancelToken } = native;
export const bridgeConstants = native.bridgeConstants();
