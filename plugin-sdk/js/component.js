// Binds the component's WIT imports to the API; bundled into every JS plugin's .wasm by
// scripts/js/componentize.mjs, never loaded under Node (which has no `worker:` modules).
import * as host from "worker:plugin/host@2.0.0";
import * as kv from "worker:plugin/kv@2.0.0";
import * as sql from "worker:plugin/sql@2.0.0";
import { bindHost } from "./bindings.js";

bindHost({ host, kv, sql });
