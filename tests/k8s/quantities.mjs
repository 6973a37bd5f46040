// Kubernetes quantities, as the deployment checks read them.

// CPU in millicores: "2", 2, "2000m" are two CPUs; "1.5", "500m" are not whole.
export function millis(quantity) {
  const m = /^([0-9.]+)(m?)$/.exec(String(quantity));
  if (!m) return NaN;
  return m[2] === "m" ? Number(m[1]) : Number(m[1]) * 1000;
}

// Bytes: "28511Mi", "1G", "4096".
export function bytes(quantity) {
  const units = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12, "": 1 };
  const m = /^([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(quantity));
  return m ? Number(m[1]) * units[m[2] ?? ""] : NaN;
}
