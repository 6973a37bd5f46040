#!/usr/bin/env node
// Validates custom resources against their CRD's openAPIV3Schema, offline,
// the way the API server's structural-schema validation would: types,
// patterns, required fields and unknown fields (pruned by the server, so
// an error here: what we send would not be what is stored).
//
//   node validate_crd.mjs CRD.yaml FILE...     (FILE: JSON or YAML, several documents allowed)
//
// Exit status: 0 all valid, 1 some object invalid, 2 usage or I/O error.
import fs from "node:fs";
import { parseAllDocuments } from "yaml";
import AjvModule from "ajv";

const Ajv = AjvModule.default ?? AjvModule;
const [crdPath, ...files] = process.argv.slice(2);
if (!crdPath || files.length === 0) {
  console.error("usage: validate_crd.mjs CRD.yaml FILE...");
  process.exit(2);
}

function documents(path) {
  let text;
  try {
    text = fs.readFileSync(path, "utf8");
  } catch (e) {
    console.error(`validate_crd: ${path}: ${e.message}`);
    process.exit(2);
  }
  return parseAllDocuments(text).map((d) => d.toJS()).filter((d) => d != null);
}

// Structural schemas reject unknown fields unless told otherwise; ajv needs
// that spelled out, and the Kubernetes extensions turned into JSON Schema.
function strict(schema) {
  if (schema === null || typeof schema !== "object") return schema;
  const out = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key.startsWith("x-kubernetes-")) continue;
    if (key === "properties") {
      out.properties = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, strict(v)]));
    } else if (key === "items" || key === "additionalProperties") {
      out[key] = strict(value);
    } else if (key === "anyOf" || key === "allOf" || key === "oneOf") {
      out[key] = value.map(strict);
    } else if (key !== "description") {
      out[key] = value;
    }
  }
  if (schema["x-kubernetes-int-or-string"]) {
    const { pattern, ...rest } = out;
    delete rest.anyOf;
    return { ...rest, anyOf: [{ type: "integer" }, { type: "string", ...(pattern ? { pattern } : {}) }] };
  }
  if (out.type === "object" && out.properties && !schema["x-kubernetes-preserve-unknown-fields"] &&
      out.additionalProperties === undefined) {
    out.additionalProperties = false;
  }
  return out;
}

const crds = documents(crdPath).filter((d) => d.kind === "CustomResourceDefinition");
const validators = new Map();  // "group/version Kind" -> validate function
const ajv = new Ajv({ allErrors: true, strict: false });
// OpenAPI's integer formats: the range checks ajv would need are not what
// we are after here, so they are accepted as plain integers.
for (const format of ["int32", "int64"]) ajv.addFormat(format, true);
for (const crd of crds) {
  for (const version of crd.spec.versions.filter((v) => v.served)) {
    const schema = strict(version.schema.openAPIV3Schema);
    // metadata is the API server's ObjectMeta, not part of the CRD's schema.
    schema.properties.metadata = { type: "object" };
    validators.set(`${crd.spec.group}/${version.name} ${crd.spec.names.kind}`, ajv.compile(schema));
  }
}

let bad = 0;
let checked = 0;
for (const file of files) {
  for (const doc of documents(file)) {
    const key = `${doc.apiVersion} ${doc.kind}`;
    const validate = validators.get(key);
    if (!validate) {
      console.error(`${file}: no served CRD version for ${key}`);
      bad++;
      continue;
    }
    checked++;
    if (!validate(doc)) {
      bad++;
      for (const e of validate.errors) {
        console.error(`${file}: ${doc.metadata?.name ?? "?"}: ${e.instancePath || "/"} ${e.message}` +
                      (e.params?.additionalProperty ? ` (${e.params.additionalProperty})` : ""));
      }
    }
    if (!doc.metadata?.name) {
      console.error(`${file}: object without metadata.name`);
      bad++;
    }
  }
}
console.log(`${checked} object(s) checked, ${bad} invalid`);
process.exit(bad === 0 && checked > 0 ? 0 : 1);
