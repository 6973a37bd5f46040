#!/usr/bin/env node
// Validates Kubernetes objects offline, the way the API server with strict
// field validation would, as far as that can be done without one:
//
//   node validate.mjs [--crd CRD.yaml]... FILE...
//
// - built-in kinds: types, required fields, enums and formats with the JSON
//   schemas of `kubernetes-models` (generated from the Kubernetes OpenAPI);
//   those allow any extra field, so unknown fields are found by walking the
//   object along the field tables of `@kubernetes/client-node`;
// - custom resources: ajv against the served version's openAPIV3Schema of a
//   CRD given with --crd, unknown fields rejected (a structural schema would
//   prune them: what was sent would not be what is stored);
// - kinds of other projects whose typed models are on npm (the Prometheus
//   Operator's ServiceMonitor): types, required fields and enums; their
//   unknown fields cannot be checked (said in the summary);
// - any other kind is an error: nothing goes unchecked silently.
// Not checked (needs a server): CEL rules, admission, defaulting, immutability.
// Exit status: 0 all valid, 1 some object invalid, 2 usage or I/O error.
import fs from "node:fs";
import { parseAllDocuments } from "yaml";
import AjvModule from "ajv";
import * as clientNode from "@kubernetes/client-node";

const Ajv = AjvModule.default ?? AjvModule;
const files = [];
const crdFiles = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--crd" && i + 1 < argv.length) crdFiles.push(argv[++i]);
  else if (argv[i].startsWith("--")) usage(`unknown option ${argv[i]}`);
  else files.push(argv[i]);
}
if (files.length === 0) usage("no input file");

function usage(message) {
  console.error(`validate.mjs: ${message}\nusage: validate.mjs [--crd CRD.yaml]... FILE...`);
  process.exit(2);
}

// API groups of other projects and the npm package with their typed models.
const MODEL_PACKAGES = { "monitoring.coreos.com": "@kubernetes-models/prometheus-operator" };

// The API server reads YAML 1.1 (yes/no are booleans), duplicate keys are
// an error, timestamps stay strings.
function documents(path) {
  let text;
  try {
    text = fs.readFileSync(path, "utf8");
  } catch (e) {
    console.error(`validate.mjs: ${path}: ${e.message}`);
    process.exit(2);
  }
  const docs = parseAllDocuments(text, {
    version: "1.1",
    uniqueKeys: true,
    customTags: (tags) => tags.filter((t) => !/:timestamp$/.test(t.tag)),
  });
  return docs.flatMap((doc, i) => {
    const where = `${path} document ${i + 1}`;
    if (doc.errors.length) return [{ where, error: `YAML: ${doc.errors[0].message.split("\n")[0]}` }];
    const object = doc.toJS();
    return object == null ? [] : [{ where, object }];
  });
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const pathOf = (instancePath) =>
  instancePath.split("/").slice(1).reduce((acc, s) => (/^\d+$/.test(s) ? `${acc}[${s}]` : acc ? `${acc}.${s}` : s), "") || "<root>";
const ajvMessages = (errors) =>
  (errors ?? []).map((e) =>
    e.keyword === "additionalProperties"
      ? `unknown field "${[pathOf(e.instancePath), e.params.additionalProperty].filter((s) => s !== "<root>").join(".")}"`
      : `${pathOf(e.instancePath)}: ${e.message}${e.params?.allowedValues ? ` (${e.params.allowedValues.join(", ")})` : ""}`);

// ---- custom resources: a CRD's structural schema as strict JSON Schema.
function structural(schema) {
  if (!isObject(schema)) return schema;
  const out = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key.startsWith("x-kubernetes-") || key === "description" || key === "nullable") continue;
    if (key === "properties") out.properties = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, structural(v)]));
    else if (key === "items" || key === "additionalProperties") out[key] = structural(value);
    else if (key === "anyOf" || key === "allOf" || key === "oneOf") out[key] = value.map(structural);
    else out[key] = value;
  }
  if (schema["x-kubernetes-int-or-string"]) {
    const { pattern, type, ...rest } = out;
    return { ...rest, anyOf: [{ type: "integer" }, { type: "string", ...(pattern ? { pattern } : {}) }] };
  }
  if (schema.nullable && typeof out.type === "string") out.type = [out.type, "null"];
  if (out.type === "object" && out.properties && out.additionalProperties === undefined &&
      !schema["x-kubernetes-preserve-unknown-fields"]) out.additionalProperties = false;
  return out;
}
const ajv = new Ajv({ allErrors: true, strict: false });
for (const format of ["int32", "int64", "double", "float", "byte", "date-time", "quantity"]) ajv.addFormat(format, true);
const customKinds = new Map(); // "group/version Kind" -> validate
for (const file of crdFiles) {
  for (const { object: crd } of documents(file).filter((d) => d.object?.kind === "CustomResourceDefinition")) {
    for (const version of crd.spec.versions.filter((v) => v.served)) {
      const schema = structural(version.schema.openAPIV3Schema);
      schema.properties.apiVersion = { type: "string" };
      schema.properties.kind = { type: "string" };
      schema.properties.metadata = { type: "object" }; // ObjectMeta: checked below like a built-in's
      customKinds.set(`${crd.spec.group}/${version.name} ${crd.spec.names.kind}`, ajv.compile(schema));
    }
  }
}

// ---- built-in kinds.
async function builtinModel(apiVersion, kind) {
  if (!/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) return null;
  const group = apiVersion.includes("/") ? apiVersion.split("/")[0] : "";
  try {
    return (await import(`${MODEL_PACKAGES[group] ?? "kubernetes-models"}/${apiVersion}/${kind}`))[kind] ?? null;
  } catch (e) {
    if (e.code === "ERR_PACKAGE_PATH_NOT_EXPORTED" || e.code === "ERR_MODULE_NOT_FOUND") return null;
    throw e;
  }
}
// client-node names its classes V1Deployment, RbacAuthorizationV1ClusterRole...
function fieldTable(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const v = version[0].toUpperCase() + version.slice(1);
  const g = group.split(".")[0].replace(/(^|-)([a-z])/g, (_, __, c) => c.toUpperCase());
  return [`${v}${kind}`, `${g}${v}${kind}`].find((n) => clientNode[n]?.getAttributeTypeMap) ?? null;
}
function unknownFields(value, type, where, out) {
  let m;
  if (value == null) return;
  if ((m = /^Array<(.+)>$/.exec(type))) {
    if (Array.isArray(value)) value.forEach((v, i) => unknownFields(v, m[1], `${where}[${i}]`, out));
  } else if ((m = /^\{ \[key: string\]: (.+); \}$/.exec(type))) {
    if (isObject(value)) for (const [k, v] of Object.entries(value)) unknownFields(v, m[1], `${where}.${k}`, out);
  } else if (clientNode[type]?.getAttributeTypeMap && isObject(value)) {
    const fields = new Map(clientNode[type].getAttributeTypeMap().map((a) => [a.baseName, a.type]));
    for (const [k, v] of Object.entries(value)) {
      const p = where ? `${where}.${k}` : k;
      if (!fields.has(k)) out.push(`unknown field "${p}"`);
      else unknownFields(v, fields.get(k), p, out);
    }
  }
}

let checked = 0;
let invalid = 0;
const typesOnly = new Set();
for (const { where, object, error } of files.flatMap(documents)) {
  const problems = [];
  if (error) problems.push(error);
  else if (!isObject(object) || !object.apiVersion || !object.kind) problems.push("apiVersion and kind are required");
  else {
    const { apiVersion, kind } = object;
    if (!object.metadata?.name) problems.push("metadata.name is required");
    const custom = customKinds.get(`${apiVersion} ${kind}`);
    const Model = custom ? null : await builtinModel(apiVersion, kind);
    if (custom) {
      if (!custom(object)) problems.push(...ajvMessages(custom.errors));
      unknownFields(object.metadata, "V1ObjectMeta", "metadata", problems);
    } else if (Model) {
      try {
        new Model(object).validate();
      } catch (e) {
        problems.push(...(Array.isArray(e.errors) ? ajvMessages(e.errors) : [e.message]));
      }
      const table = fieldTable(apiVersion, kind);
      if (table) unknownFields(object, table, "", problems);
      else if (MODEL_PACKAGES[apiVersion.split("/")[0]]) {
        typesOnly.add(`${apiVersion} ${kind}`);
        unknownFields(object.metadata, "V1ObjectMeta", "metadata", problems);
      } else problems.push(`no field table for ${apiVersion} ${kind}: unknown fields cannot be checked`);
    } else {
      problems.push(`no schema for ${apiVersion} ${kind} (give its CRD with --crd)`);
    }
  }
  checked++;
  if (problems.length) {
    invalid++;
    const name = `${object?.kind ?? "?"}/${object?.metadata?.name ?? "?"}`;
    for (const p of problems) console.error(`INVALID ${where} (${name}): ${p}`);
  }
}
console.log(`${checked} object(s) checked, ${invalid} invalid` +
  (typesOnly.size ? ` (unknown fields not checked in ${[...typesOnly].join(", ")}: no field table)` : ""));
process.exit(invalid === 0 && checked > 0 ? 0 : 1);
