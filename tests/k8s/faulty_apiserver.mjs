// A fault injector between a client and the real API server (as toxiproxy
// is, for HTTPS): it terminates TLS with CERT/KEY, passes every request on
// to UPSTREAM (trusting UPSTREAM_CA) with its own headers (the client's
// token), and answers a request that matches a rule of RULES (a JSON file
// read at every request, so a test changes the faults while it runs) with
// the rule's fault instead:
//   {"match": "PATCH /apis/apps/v1/", "fault": "conflict"}  409 and the API
//       server's Status body for a write that lost a race (Conflict)
//   {"match": "GET /api/v1/nodes", "fault": "truncate"}     the upstream's
//       reply, its header whole and half its body, then the connection cut:
//       a list that fails half-way
//   {"match": "", "fault": "reset"}                          the connection cut
//       before any reply
// "match" is a prefix of "METHOD /path?query". Counts the faults it
// injected, by rule, into COUNTS (JSON) after each one.
// Usage: node faulty_apiserver.mjs UPSTREAM UPSTREAM_CA CERT KEY RULES COUNTS
// Prints "listening PORT" once it listens on 127.0.0.1.
import fs from "node:fs";
import https from "node:https";

const [upstream, upstreamCa, cert, key, rulesFile, countsFile] = process.argv.slice(2);
const target = new URL(upstream);
const ca = fs.readFileSync(upstreamCa);
const counts = {};

function rules() {
  try {
    return JSON.parse(fs.readFileSync(rulesFile, "utf8"));
  } catch {
    return [];  // no file, or one being written: no faults
  }
}

function injected(rule) {
  const name = `${rule.fault} ${rule.match}`;
  counts[name] = (counts[name] || 0) + 1;
  fs.writeFileSync(countsFile, JSON.stringify(counts));
}

function conflict(req, res) {
  const body = JSON.stringify({
    kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", reason: "Conflict", code: 409,
    message: `Operation cannot be fulfilled on ${req.url.split("?")[0]}: the object has been modified; ` +
      "please apply your changes to the latest version and try again",
  });
  res.writeHead(409, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

const server = https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, (req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const line = `${req.method} ${req.url}`;
    const rule = rules().find((r) => line.startsWith(r.match));
    if (rule?.fault === "reset") {
      injected(rule);
      req.socket.destroy();
      return;
    }
    if (rule?.fault === "conflict") {
      injected(rule);
      conflict(req, res);
      return;
    }
    const headers = { ...req.headers, host: target.host };
    const up = https.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers, ca }, (reply) => {
      const body = [];
      reply.on("data", (c) => body.push(c));
      reply.on("end", () => {
        const whole = Buffer.concat(body);
        const out = { ...reply.headers };
        delete out["transfer-encoding"];
        out["content-length"] = whole.length;
        res.writeHead(reply.statusCode, out);
        if (rule?.fault === "truncate" && whole.length > 1) {
          injected(rule);
          res.write(whole.subarray(0, whole.length >> 1), () => res.socket.destroy());
          return;
        }
        res.end(whole);
      });
    });
    up.on("error", () => req.socket.destroy());  // the API server gone: so is the answer
    up.end(Buffer.concat(chunks));
  });
});
server.listen(0, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
