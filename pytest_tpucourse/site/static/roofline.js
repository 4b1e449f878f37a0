// EX·01 the roofline playground. The floor is roofline.py's formula, computed here so the page
// follows its shape field with no server: tests/test_site.py checks that this and roofline.py
// agree on a table of cases. The chips' figures come from the page's data (chips.py).
"use strict";
const TpuRoofline = (() => {
  const data = Site.data;
  const chip = name => {
    const found = data.chips.find(c => c.name === name);
    if (!found) throw new Error(`unknown chip ${name}`);
    return found;
  };
  function parseShape(text) {
    const parts = String(text).trim().toLowerCase().replace(/×/g, "x").split("x");
    const dims = parts.map(p => (/^\d+$/.test(p.trim()) ? Number(p) : NaN));
    if (dims.some(d => !Number.isInteger(d) || d < 1)) throw new Error(`shape ${text} is not of the form 4096x4096`);
    return dims;
  }
  // roofline.matmul_cost and roofline.elementwise_cost (two inputs): each operand read once, the result written once.
  function cost(op, dims, dtype) {
    const size = data.dtypes[dtype];
    if (!size) throw new Error(`unknown dtype ${dtype}`);
    if (op === "matmul") {
      if (dims.length !== 3) throw new Error(`op matmul takes a 3-dimensional shape (MxKxN), got ${dims.join("x")}`);
      const [m, k, n] = dims;
      return { flops: 2 * m * k * n, bytes: (m * k + k * n + m * n) * size };
    }
    if (op === "add") {
      if (dims.length !== 2) throw new Error(`op add takes a 2-dimensional shape (MxN), got ${dims.join("x")}`);
      const elements = dims[0] * dims[1];
      return { flops: elements, bytes: 3 * elements * size };
    }
    throw new Error(`unknown op ${op}`);
  }
  function peak(c, dtype) {
    const family = data.families[dtype];
    if (!(family in c.peaks)) throw new Error(`${c.device}: no published ${family} peak; the roofline cannot bound ${family} compute on it`);
    return c.peaks[family];
  }
  // roofline.predict: the larger of the compute and the memory time, and which one it is.
  function floor(chipName, op, shapeText, dtype) {
    const c = chip(chipName), { flops, bytes } = cost(op, parseShape(shapeText), dtype), p = peak(c, dtype);
    const compute = flops / p, memory = bytes / c.hbm_bandwidth;
    return { flops, bytes, compute_seconds: compute, memory_seconds: memory, floor_seconds: Math.max(compute, memory),
             bound: compute >= memory ? "compute" : "memory", intensity: flops / bytes, ridge: p / c.hbm_bandwidth };
  }
  return { chip, parseShape, cost, peak, floor };
})();

(() => {
  const data = Site.data;
  const $ = id => document.getElementById(id);
  const chipSel = $("chip"), opSel = $("op"), shape = $("shape"), dtypeSel = $("dtype"), svg = $("plot");
  for (const c of data.chips) chipSel.append(new Option(`${c.name} (${c.kind})`, c.name, false, c.name === data.default_chip));
  for (const d of Object.keys(data.dtypes)) dtypeSel.append(new Option(d, d));
  const W = 640, H = 380, L = 64, R = 16, T = 20, B = 46, X0 = -1, X1 = 4;
  const NS = "http://www.w3.org/2000/svg";
  const node = (tag, attrs, text) => {
    const n = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    return n;
  };
  let yTop = 15, yBottom = 10;
  const x = i => L + (Math.log10(i) - X0) / (X1 - X0) * (W - L - R);
  const y = f => T + (yTop - Math.log10(f)) / (yTop - yBottom) * (H - T - B);
  const xInverse = px => 10 ** (X0 + (px - L) / (W - L - R) * (X1 - X0));

  function draw(prediction) {
    const c = TpuRoofline.chip(chipSel.value), dtype = dtypeSel.value;
    let p;
    try { p = TpuRoofline.peak(c, dtype); } catch (err) { p = TpuRoofline.peak(c, "bfloat16"); }
    yTop = Math.ceil(Math.log10(p) + 0.3); yBottom = yTop - 6;
    const ridge = p / c.hbm_bandwidth;
    svg.replaceChildren();
    svg.append(node("text", { class: "title", x: L, y: 13 }, `${c.device}: peak ${p.toPrecision(3)} FLOP/s, HBM ${c.hbm_bandwidth.toPrecision(3)} B/s (chips.py)`));
    for (let d = X0; d <= X1; d++) {
      svg.append(node("line", { class: "grid", x1: x(10 ** d), x2: x(10 ** d), y1: T, y2: H - B }));
      svg.append(node("text", { class: "axis", x: x(10 ** d), y: H - B + 14, "text-anchor": "middle" }, `1e${d}`));
    }
    for (let d = yBottom; d <= yTop; d++) {
      svg.append(node("line", { class: "grid", x1: L, x2: W - R, y1: y(10 ** d), y2: y(10 ** d) }));
      svg.append(node("text", { class: "axis", x: L - 6, y: y(10 ** d) + 4, "text-anchor": "end" }, `1e${d}`));
    }
    const lo = 10 ** X0, hi = 10 ** X1;
    svg.append(node("path", { class: "roof", d: `M${x(lo)},${y(Math.max(lo * c.hbm_bandwidth, 10 ** yBottom))} L${x(ridge)},${y(p)} L${x(hi)},${y(p)}` }));
    svg.append(node("line", { class: "ridge", x1: x(ridge), x2: x(ridge), y1: y(p), y2: H - B }));
    svg.append(node("text", { class: "ridge-label", x: x(ridge) + 4, y: H - B - 6 }, `ridge ${ridge.toFixed(0)} FLOP/byte`));
    svg.append(node("text", { class: "axis", x: (L + W) / 2, y: H - 8, "text-anchor": "middle" }, "arithmetic intensity (FLOP per HBM byte)"));
    svg.append(node("text", { class: "axis", transform: "rotate(-90)", x: -(T + H - B) / 2, y: 14, "text-anchor": "middle" }, "attainable FLOP/s"));
    data.ops.forEach((op, i) => {
      let f;
      try { f = TpuRoofline.floor(c.name, op.op, op.shape, op.dtype); } catch (err) { return; }
      const g = node("g", { class: "point" });
      g.append(node("circle", { cx: x(f.intensity), cy: y(f.flops / f.floor_seconds), r: 4 }));
      const right = x(f.intensity) > W * 0.7;
      g.append(node("text", { x: x(f.intensity) + (right ? -7 : 7), y: y(f.flops / f.floor_seconds) + 14 + 11 * i,
        "text-anchor": right ? "end" : "start" },
        `${op.name}: predicted ${Site.us(f.floor_seconds)} (${op.dtype})`));
      svg.append(g);
    });
    if (prediction) {
      const g = node("g", { class: "point active", id: "you" });
      const cx = x(Math.min(Math.max(prediction.intensity, lo), hi)), cy = y(prediction.flops / prediction.floor_seconds);
      g.append(node("circle", { cx, cy, r: 7 }));
      g.append(node("text", { x: cx + (cx > W * 0.7 ? -10 : 10), y: cy - 8, "text-anchor": cx > W * 0.7 ? "end" : "start" }, `${opSel.value} ${shape.value}: predicted ${Site.us(prediction.floor_seconds)}`));
      svg.append(g);
      g.addEventListener("pointerdown", startDrag);
    }
  }

  function update() {
    const floorEl = $("floor"), detail = $("detail");
    let dims;
    try { dims = TpuRoofline.parseShape(shape.value); } catch (err) { dims = null; }
    if (dims && dims.length === 3) opSel.value = "matmul";
    if (dims && dims.length === 2) opSel.value = "add";
    const c = TpuRoofline.chip(chipSel.value);
    $("figures").textContent = `${c.device}: ${Object.entries(c.peaks).map(([k, v]) => `${k} ${v.toPrecision(3)} FLOP/s`).join(", ")}; ` +
      `HBM ${c.hbm_bandwidth.toPrecision(3)} B/s · from ${[...new Set(Object.values(c.sources))].join("; ") || "the chip table"}`;
    try {
      const f = TpuRoofline.floor(chipSel.value, opSel.value, shape.value, dtypeSel.value);
      floorEl.textContent = `${Site.us(f.floor_seconds)} (${f.bound}-bound)`;
      detail.textContent = `roofline-predicted · ${c.name} · ${dtypeSel.value} · ${shape.value}: ` +
        `${f.flops.toLocaleString("en")} FLOPs, ${f.bytes.toLocaleString("en")} HBM bytes; compute ${Site.us(f.compute_seconds)}, ` +
        `memory ${Site.us(f.memory_seconds)}; intensity ${f.intensity.toFixed(1)} FLOP/byte, ` +
        `${f.intensity >= f.ridge ? "above" : "below"} the ridge (${f.ridge.toFixed(1)})`;
      draw(f);
    } catch (err) {
      floorEl.textContent = "—";
      detail.textContent = err.message;
      draw(null);
    }
  }

  // Dragging the point sets M (the rows) of a matmul so that its intensity is where the pointer is.
  function startDrag(ev) {
    if (opSel.value !== "matmul") { $("detail").textContent = "an add's intensity is fixed by its dtype: drag a matmul"; return; }
    ev.preventDefault();
    const move = e => {
      const box = svg.getBoundingClientRect(), px = (e.clientX - box.left) * W / box.width;
      const target = xInverse(px), s = data.dtypes[dtypeSel.value];
      const [, k, n] = TpuRoofline.parseShape(shape.value);
      const denominator = 2 * k * n - target * s * (k + n);
      const m = denominator > 0 ? Math.max(1, Math.round(target * s * k * n / denominator)) : 65536;
      shape.value = `${Math.min(m, 65536)}x${k}x${n}`;
      update();
    };
    const up = () => { window.removeEventListener("pointermove", move); window.removeEventListener("pointerup", up); };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", up);
  }

  for (const control of [chipSel, dtypeSel]) control.addEventListener("change", update);
  opSel.addEventListener("change", () => { shape.value = opSel.value === "add" ? "4096x4096" : "8x4096x4096"; update(); });
  shape.addEventListener("input", update);
  shape.addEventListener("change", update);
  update();
})();
