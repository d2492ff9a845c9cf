// Builds the addon: `node build.mjs [--release] [cargo build options]` writes `mcp-resume.node`
// and its generated declarations `native.d.ts` next to this file (the options go to cargo,
// e.g. `--features bench` for bench/calls-per-second.mjs).
//
// `napi build` would do the same, but it always passes `--target <host triple>`, which gives
// the build a directory of its own under the target directory: nothing compiled for the
// repository's own workspace (rustls, aws-lc, serde, …) could be reused. This runs `cargo build`
// for the host, in `$CARGO_TARGET_DIR` (default: the repository's `target/`), and takes the
// declaration generator from `@napi-rs/cli`.
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { generateTypeDef } from "@napi-rs/cli";

const here = dirname(fileURLToPath(import.meta.url));
const targetDir = resolve(process.env.CARGO_TARGET_DIR ?? join(here, "../../target"));
const options = process.argv.slice(2);
const release = options.includes("--release");
const crate = "mcp-resume-node";

// napi-derive writes each exported item's declaration here while it expands the macros;
// an up-to-date crate is not expanded again, so the folder is kept between builds (one per
// set of options: features change what is exported), and a build is forced only when the
// crate's file is missing (as `napi build` does).
const typeDefDir = join(targetDir, "napi-type-defs", options.join(" ").replace(/[^\w-]+/g, "_") || "default");
mkdirSync(typeDefDir, { recursive: true });
const env = { ...process.env, CARGO_TARGET_DIR: targetDir, NAPI_TYPE_DEF_TMP_FOLDER: typeDefDir };
if (!existsSync(join(typeDefDir, crate))) {
  env[`NAPI_FORCE_BUILD_${crate.replaceAll("-", "_").toUpperCase()}`] = String(Date.now());
}

const args = ["build", "--manifest-path", join(here, "Cargo.toml"), ...options];
const cargo = spawnSync("cargo", args, { env, stdio: "inherit" });
if (cargo.status !== 0) {
  process.exit(cargo.status ?? 1);
}

// Renamed into place: a Node process that has the previous addon loaded keeps its copy.
const built = join(targetDir, release ? "release" : "debug", `lib${crate.replaceAll("-", "_")}.so`);
const addon = join(here, "mcp-resume.node");
copyFileSync(built, `${addon}.tmp`);
renameSync(`${addon}.tmp`, addon);

const { dts } = await generateTypeDef({ typeDefDir, cwd: here });
writeFileSync(join(here, "native.d.ts"), dts);
