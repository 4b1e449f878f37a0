// EX·10 the semaphore timeline: a schedule stepped round by round, one column per device, the
// deadlock marked in the round it happens. Shipped runs are timeline.run's (the page's data);
// under --serve the same schedules can be played by the learner's own simulate().
"use strict";
(() => {
  const d = Site.data, $ = id => document.getElementById(id);
  const schedule = $("tl-schedule"), devices = $("tl-devices"), mine = $("tl-mine");
  for (const [name, s] of Object.entries(d.schedules)) schedule.append(new Option(name, name, false, name === d.default));
  let run = null, round = 0, end = 0, what = d.what, served = false, pending = 0, waiting = false;
  const COURSES = "The table shows the course's run (timeline.py's), not yours.";

  // What became of "your simulate()": said in words under the controls, until the next change.
  function status(kind, text) {
    const line = $("tl-mine-status");
    line.hidden = !text;
    line.className = `mine-status ${kind}`;
    line.textContent = text || "";
  }
  const sentence = text => `${text[0].toUpperCase()}${text.slice(1)}${/[.!?]$/.test(text) ? "" : "."}`;
  function untick(text) { mine.checked = false; status("problem", `${text} ${COURSES}`); }

  function fillDevices() {
    const counts = Object.keys(d.schedules[schedule.value].runs);
    const keep = devices.value;
    devices.replaceChildren(...counts.map(n => new Option(n, n)));
    devices.value = counts.includes(keep) ? keep : counts.includes("4") ? "4" : counts[0];
  }

  async function load() {
    const ticket = ++pending, s = d.schedules[schedule.value];
    $("tl-doc").textContent = `${schedule.value}: ${s.doc}`;
    run = s.runs[devices.value];
    what = d.what;
    if (mine.checked) served = await Site.served;
    if (ticket !== pending) return;
    if (!mine.checked) status("", "");
    else if (!served) {
      untick("This static page cannot run your code: tpucourse site --serve serves this page and runs your " +
        "simulate() from exercises/ch14/timeline.py.");
    } else {
      status("working", "running your simulate()…");
      waiting = true;  // no table until your run comes: the course's would pass for yours
      $("tl-table").replaceChildren();
      $("tl-summary").textContent = $("tl-what").textContent = $("tl-round").textContent = "";
      try {
        const answer = await Site.api("timeline", { schedule: schedule.value, devices: devices.value },
          { working: text => ticket === pending && status("working", text), stale: () => ticket !== pending });
        if (answer === null) return;
        if (answer.error) untick(sentence(answer.error));
        else { run = answer; what = answer.what; status("", "The table shows your simulate()'s run."); }
      } catch (err) {
        if (ticket !== pending) return;
        untick(sentence(`the server did not answer: ${err.message}`));
      }
    }
    waiting = false;
    const last = Math.max(-1, ...run.rounds.map(r => (r.length ? r[r.length - 1] : -1)));
    end = run.deadlock ? last + 1 : last;
    round = 0;
    draw();
  }

  function cell(device, r) {
    const ops = run.ops[device], ran = run.rounds[device];
    const step = ran.indexOf(r);
    if (r > round) return ["", "future"];
    if (step >= 0) return [ops[step], r === round ? "now" : "ran"];
    const blockedFrom = ran.length ? ran[ran.length - 1] + 1 : 0;
    if (r < blockedFrom) return ["", ""];
    if (ran.length < ops.length) {
      if (run.deadlock && r === end) return [`✗ ${ops[ran.length]}`, "stuck"];
      return ["⋮ waiting", "waiting"];
    }
    return ["·", ""];
  }

  function draw() {
    if (waiting) return;
    const table = Site.el("table", { class: "tl" }), head = Site.el("tr");
    head.append(Site.el("th", {}, "round"), ...run.ops.map((_, i) => Site.el("th", {}, `device ${i}`)));
    table.append(head);
    for (let r = 0; r <= end; r++) {
      const tr = Site.el("tr");
      tr.append(Site.el("th", {}, String(r)));
      run.ops.forEach((_, device) => { const [text, cls] = cell(device, r); tr.append(Site.el("td", { class: cls }, text)); });
      table.append(tr);
    }
    $("tl-table").replaceChildren(table);
    $("tl-round").textContent = `round ${round} of ${end}`;
    const summary = $("tl-summary");
    if (round === end) {
      summary.className = `big ${run.deadlock ? "deadlock" : ""}`;
      summary.textContent = run.summary;
    } else {
      summary.className = "big";
      summary.textContent = "step on: round → (or the → key)";
    }
    $("tl-what").textContent = `what this is: ${what}`;
  }

  const step = by => { round = Math.min(end, Math.max(0, round + by)); draw(); };
  $("tl-step").addEventListener("click", () => step(1));
  $("tl-back").addEventListener("click", () => step(-1));
  document.addEventListener("keydown", ev => {
    if (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT") return;
    if (ev.key === "ArrowRight") step(1);
    if (ev.key === "ArrowLeft") step(-1);
  });
  schedule.addEventListener("change", () => { fillDevices(); load(); });
  devices.addEventListener("change", load);
  mine.addEventListener("change", load);
  fillDevices();
  load();
  Site.served.then(s => { served = s; });
})();
