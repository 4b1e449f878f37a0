// EX·11 the mesh: a slice drawn from its topology, and a collective's steps hop by hop along each
// axis (ici.plan), every send labelled with its chunk and its per-link time. Precomputed plans come
// with the page; under --serve any topology is answered live.
"use strict";
(() => {
  const d = Site.data, $ = id => document.getElementById(id);
  const chip = $("mesh-chip"), topology = $("topology"), op = $("mesh-op"), size = $("mesh-bytes"), slider = $("mesh-step");
  for (const c of d.chips) chip.append(new Option(c, c));
  for (const o of d.ops) op.append(new Option(o, o));
  for (const s of d.sizes) size.append(new Option(s, s, false, s === "1GiB"));
  let plan = null, served = false, pending = 0;
  const NS = "http://www.w3.org/2000/svg", svg = $("mesh");
  const node = (tag, attrs, text) => {
    const n = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    return n;
  };
  const mib = b => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : b >= 2 ** 20 ? `${(b / 2 ** 20).toFixed(2)} MiB` : `${(b / 2 ** 10).toFixed(1)} KiB`);
  const steps = () => plan.phases.flatMap((p, i) => p.steps.map((sends, s) => ({ phase: i, step: s, sends })));

  function fillTopologies() {
    $("mesh-topologies").replaceChildren(...d.topologies[chip.value].map(t => new Option(t)));
  }

  async function load() {
    const key = `${chip.value}|${topology.value.trim().toLowerCase()}|${op.value}|${size.value}`;
    const ticket = ++pending;
    if (d.plans[key]) plan = d.plans[key];
    else if (served) {
      try { plan = await Site.api("mesh", { chip: chip.value, topology: topology.value, op: op.value, bytes: size.value }); }
      catch (err) { if (ticket === pending) { plan = null; message(err.message); } return; }
    } else {
      plan = null;
      message(`${topology.value} is not precomputed in this static build (${d.topologies[chip.value].join(", ")} are); ` +
        `tpucourse mesh --chip ${chip.value} --topology ${topology.value} --op ${op.value} --bytes ${size.value} answers it, ` +
        "and tpucourse site --serve answers it here");
      return;
    }
    if (ticket !== pending) return;
    slider.max = String(Math.max(0, steps().length - 1));
    slider.value = "0";
    draw();
  }

  // A chip's label, its font shrunk until it fits inside the box; none where it would be unreadable.
  function label(g, x, y, text) {
    const box = Number(g.firstChild.getAttribute("width")), room = box - 4;
    let size = 11;
    const t = node("text", { x, y, "dominant-baseline": "central" }, text);
    t.style.fontSize = `${size}px`;
    g.append(t);
    const width = t.getComputedTextLength();
    if (width > room) size = Math.floor(size * room / width * 10) / 10;
    if (size < 6) t.remove();
    else t.style.fontSize = `${size}px`;
  }

  function message(text) {
    svg.replaceChildren();
    $("mesh-phases").replaceChildren();
    $("mesh-total").textContent = "";
    $("mesh-what").textContent = text;
  }

  function draw() {
    const dims = plan.topology, all = steps(), now = all[Number(slider.value)];
    const [d0, d1 = 1, d2 = 1] = dims, L = d.layout;  // the layout instruments.py checks a slice fits
    const sp = Math.min(L.max_pitch, L.across / (d0 * d2 + (d2 - 1) * L.plane_gap), L.down / d1), box = sp * 0.6;
    const pos = c => [30 + ((c[2] || 0) * (d0 + L.plane_gap) + (c[0] || 0)) * sp + sp / 2, 34 + (c[1] || 0) * sp + sp / 2];
    svg.replaceChildren();
    const defs = node("defs", {}), marker = node("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" });
    marker.append(node("path", { d: "M0,0 L10,5 L0,10 z", fill: "#c2410c" }));
    defs.append(marker);
    svg.append(defs);
    const phase = now ? plan.phases[now.phase] : null;
    const onLine = c => phase && c.every((v, a) => a === phase.axis || v === 0);
    for (let k = 0; k < d2; k++) for (let j = 0; j < d1; j++) for (let i = 0; i < d0; i++) {
      const c = [i, j, k].slice(0, Math.max(dims.length, 1)), [x, y] = pos(c);
      if (i + 1 < d0) { const [x2, y2] = pos([i + 1, j, k]); svg.append(node("line", { class: "link", x1: x, y1: y, x2, y2 })); }
      if (j + 1 < d1) { const [x2, y2] = pos([i, j + 1, k]); svg.append(node("line", { class: "link", x1: x, y1: y, x2, y2 })); }
    }
    for (let k = 0; k < d2; k++) for (let j = 0; j < d1; j++) for (let i = 0; i < d0; i++) {
      const c = [i, j, k], [x, y] = pos(c), g = node("g", { class: `chip${onLine(c.slice(0, dims.length)) ? " active" : ""}` });
      g.append(node("rect", { x: x - box / 2, y: y - box / 2, width: box, height: box, rx: Math.min(3, box / 4) }));
      svg.append(g);
      label(g, x, y, dims.length === 1 ? `${i}` : c.slice(0, dims.length).join(","));
    }
    if (d2 > 1) for (let k = 0; k < d2; k++) svg.append(node("text", { class: "axis", x: pos([0, 0, k])[0] - box / 2, y: 18 }, `axis 2 = ${k}`));
    if (phase) {
      now.sends.forEach(([src, dst, chunk], n) => {
        const a = dims.map(() => 0), b = dims.map(() => 0);
        a[phase.axis] = src; b[phase.axis] = dst;
        const horizontal = phase.axis !== 1, wrap = Math.abs(src - dst) > 1;
        const [ax, ay] = pos(a), [bx, by] = pos(b), edge = box / 2 + 2;
        // leave and arrive at the chips' edges, on the side the arc bends to
        const bend = (dst > src ? -1 : 1) * (wrap ? sp * 0.95 : sp * 0.5);
        const side = Math.sign(bend) * edge;
        const [x1, y1] = horizontal ? [ax, ay + side] : [ax + side, ay], [x2, y2] = horizontal ? [bx, by + side] : [bx + side, by];
        const mx = (x1 + x2) / 2 + (horizontal ? 0 : bend), my = (y1 + y2) / 2 + (horizontal ? bend : 0);
        const arc = node("path", { class: "send", d: `M${x1},${y1} Q${mx},${my} ${x2},${y2}` });
        arc.style.strokeWidth = `${Math.min(2.5, sp / 16)}px`;  // the arrowhead scales with it: small chips, small arrows
        svg.append(arc);
        const apex = [(x1 + x2) / 4 + mx / 2, (y1 + y2) / 4 + my / 2];  // the arc's furthest point
        if (now.sends.length <= 16 && sp >= 30) svg.append(node("text", { class: "send-label", x: apex[0] + (horizontal ? 0 : Math.sign(bend) * 4),
          y: apex[1] + (horizontal ? (bend < 0 ? -4 : 11) : 3), "text-anchor": horizontal ? "middle" : bend < 0 ? "end" : "start" },
          `c${chunk}`));
      });
    }
    $("mesh-step-label").textContent = now ? `phase ${now.phase + 1} (${phase.op}, axis ${phase.axis}) step ${now.step + 1} of ${phase.steps.length}: ` +
      `${now.sends.length} sends along the highlighted line (cN: chunk N), each one ${mib(phase.chunk_bytes)} chunk over one link in ` +
      `${Site.us(phase.link_seconds)} (predicted); every line along axis ${phase.axis} does the same at once` : "one chip: nothing to send";
    $("mesh-phases").replaceChildren(...plan.phases.map((p, i) => Site.el("p", { class: `phase${now && i === now.phase ? " current" : ""}` },
      `${p.op} along axis ${p.axis}: ${p.size} chips, ${p.wraparound ? "ring (wraparound link)" : "line (no wraparound link)"}, ` +
      `${p.steps.length} steps of one ${mib(p.chunk_bytes)} chunk per link and direction, ${Site.us(p.link_seconds)} per link per step: ` +
      `${Site.us(p.seconds)} predicted`)));
    $("mesh-total").textContent = `${plan.op} of ${plan.bytes_text} over a ${plan.chip} ${plan.topology.join("x")} slice: ${Site.us(plan.seconds)} predicted`;
    $("mesh-what").textContent = `what this is: ${plan.what}. ${plan.slice[0].toUpperCase()}${plan.slice.slice(1)}. ` +
      `Link: ${plan.link_bandwidth.toPrecision(3)} B/s one way (${plan.link_source}).`;
  }

  chip.addEventListener("change", () => { fillTopologies(); load(); });
  for (const control of [op, size]) control.addEventListener("change", load);
  topology.addEventListener("input", load);
  slider.addEventListener("input", draw);
  fillTopologies();
  load();
  Site.served.then(s => { served = s; if (s && !plan) load(); });  // a topology typed before the server answered
})();
