// The operator's page of ratelimitd. It polls the server's JSON and
// builds its DOM from text only: every value, request values above all,
// goes through createTextNode or textContent, never through markup.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const POLL_MS = 2000;
  const RULES_EVERY = 5; // polls between two reads of the rules

  // el returns a new element tag with the class cls (if any) and the
  // children kids: nodes, or strings made text nodes.
  function el(tag, cls, ...kids) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const k of kids) {
      if (k === null || k === undefined) continue;
      e.appendChild(typeof k === "object" ? k : document.createTextNode(String(k)));
    }
    return e;
  }

  // svg returns a new SVG element with the attributes attrs.
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  // fill replaces the children of the element with id by kids.
  function fill(id, ...kids) {
    const box = document.getElementById(id);
    box.replaceChildren(...kids.filter((k) => k !== null && k !== undefined));
    return box;
  }

  // getJSON fetches path; it resolves to {status, body}, body the parsed
  // JSON of a 2xx answer, else the answer's text.
  async function getJSON(path, init) {
    const resp = await fetch(path, Object.assign({ cache: "no-store" }, init));
    const text = await resp.text();
    if (!resp.ok) return { status: resp.status, body: text };
    return { status: resp.status, body: JSON.parse(text) };
  }

  function fmtNum(n) {
    if (n === undefined || n === null) return "";
    return Number(n).toLocaleString("en-US");
  }

  // ---- status ----------------------------------------------------------

  function renderStatus(st) {
    const kids = [];
    kids.push(el("span", st.ready ? "good" : "bad", st.ready ? "ready" : "not ready"));
    kids.push(el("span", null, "store: ", el("span", st.store === "ok" ? "good" : "bad", st.store)));
    for (const b of st.breakers || []) {
      const cls = b.state === "closed" ? "good" : b.state === "open" ? "bad" : "warn";
      kids.push(el("span", null, "breaker ", el("code", null, b.node), ": ", el("span", cls, b.state)));
    }
    kids.push(el("span", null, "failure mode: ", el("code", null, st.failure_mode)));
    if (st.failure_answers) kids.push(el("span", "warn", fmtNum(st.failure_answers) + " answered by the failure mode"));
    if (st.shadow_mode) kids.push(el("span", "warn", "shadow mode"));
    if (st.replica) kids.push(el("span", null, "replica: ", el("code", null, st.replica)));
    fill("status", ...kids);
    renderUnknown(st.unknown_domains || [], st.unknown_domains_untracked || 0);
  }

  // renderUnknown shows the domains requested that have no rules: their
  // requests are answered OK, and nothing limits them (a mistyped domain,
  // or rules not loaded yet).
  function renderUnknown(domains, untracked) {
    if (!domains.length && !untracked) {
      fill("unknown-domains");
      return;
    }
    const items = domains.map((d) => el("li", null, el("code", "value", d.domain), " " + fmtNum(d.requests) +
      " requests, last at " + d.last_seen));
    if (untracked) items.push(el("li", null, fmtNum(untracked) + " requests for other domains without rules"));
    fill("unknown-domains",
      el("p", "warn", "Requests for domains that have no rules: answered OK, nothing limited."),
      el("ul", null, ...items));
  }

  // ---- rules -----------------------------------------------------------

  let rulesSig = "";

  // rateText says what a limit admits: so many per window, or, for a
  // concurrency limit, so many held at once with their lease.
  function rateText(requests, window, algorithm) {
    if (algorithm === "concurrency") return fmtNum(requests) + " at once, lease " + window + " concurrency";
    return fmtNum(requests) + " / " + window + " " + algorithm;
  }

  function limitText(l) {
    let t = rateText(l.requests, l.window, l.algorithm);
    if (l.burst) t += " burst " + fmtNum(l.burst);
    if (l.name) t += " (" + l.name + ")";
    return t;
  }

  // ruleLine returns the line of rule r, whose levels from the top are
  // path (r last).
  function ruleLine(domain, r, path) {
    const match = r.value ? r.key + "=" + r.value : r.key;
    const line = el("div", "rule", el("code", "match", match));
    line.title = r.path;
    if (r.unlimited) line.appendChild(el("span", "badge unlimited", "unlimited"));
    for (const l of r.limits) line.appendChild(el("span", "limit", limitText(l)));
    const modes = [
      ["shadow_mode", "shadow"], ["quota_mode", "quota"], ["detailed_metric", "detailed metric"],
      ["value_to_metric", "value to metric"], ["share_threshold", "shared threshold"],
    ];
    for (const [k, label] of modes) {
      if (r[k]) line.appendChild(el("span", k === "shadow_mode" ? "badge shadow" : "badge", label));
    }
    if (r.file) line.appendChild(el("span", "where", r.file + ":" + r.line));
    line.addEventListener("click", () => prefillExplain(domain, path));
    return line;
  }

  function ruleList(domain, rules, above, top) {
    const ul = el("ul", top ? "tree top" : "tree");
    for (const r of rules) {
      const path = above.concat([r]);
      const li = el("li", null, ruleLine(domain, r, path));
      if (r.children.length) li.appendChild(ruleList(domain, r.children, path, false));
      ul.appendChild(li);
    }
    return ul;
  }

  function renderRules(data) {
    const sig = JSON.stringify(data);
    if (sig === rulesSig) return;
    rulesSig = sig;
    fill("files", data.files.length ? "from " + data.files.join(", ") : "");
    const kids = [];
    for (const d of data.domains) {
      kids.push(el("div", "domain", "domain ", el("code", null, d.domain)));
      kids.push(ruleList(d.domain, d.rules, [], true));
    }
    if (!data.domains.length) kids.push(el("p", "muted", "No rules."));
    fill("rules", ...kids);
    if (!document.getElementById("explain-body").value && data.domains.length && data.domains[0].rules.length) {
      prefillExplain(data.domains[0].domain, [data.domains[0].rules[0]]);
    }
  }

  // ---- rates -----------------------------------------------------------

  // area returns the path data of the area between the series lo and hi
  // (arrays of equal length, the last value at now), scaled to w×h: span
  // seconds across, the largest value top high.
  function area(lo, hi, w, h, span, top) {
    const n = hi.length;
    if (n === 0) return "";
    const x = (i) => (w - ((n - 1 - i) * w) / (span - 1)).toFixed(1);
    const y = (v) => (h - (v / top) * h).toFixed(1);
    let d = "M" + x(0) + "," + y(hi[0]);
    for (let i = 1; i < n; i++) d += "L" + x(i) + "," + y(hi[i]);
    for (let i = n - 1; i >= 0; i--) d += "L" + x(i) + "," + y(lo[i]);
    return d + "Z";
  }

  // chart returns the chart of one rule's rates, span seconds wide.
  function chart(r, span) {
    const W = 300, H = 70;
    const total = r.admitted.map((a, i) => a + r.refused[i]);
    const top = Math.max(1, ...total);
    const zero = total.map(() => 0);
    const s = svg("svg", { viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", role: "img" });
    s.appendChild(svg("path", { class: "admitted", d: area(zero, r.admitted, W, H, span, top) }));
    s.appendChild(svg("path", { class: "refused", d: area(r.admitted, total, W, H, span, top) }));
    const title = svg("title");
    title.textContent = r.domain + " " + r.rule;
    s.appendChild(title);
    const last = r.admitted.length - 1;
    const now = last >= 0
      ? fmtNum(r.admitted[last]) + "/s admitted, " + fmtNum(r.refused[last]) + "/s refused; peak " + fmtNum(top) + "/s"
      : "";
    const box = el("div", "chart",
      el("div", "title", el("code", null, r.domain), " ", el("code", "match", r.rule)),
      el("div", "now", now), s,
      el("div", "axis", el("span", null, "-" + Math.round(span / 60) + " min"), el("span", null, "now")));
    box.dataset.rule = r.rule;
    return box;
  }

  function renderRates(v) {
    if (!v.rules.length) {
      fill("rates", el("p", "muted", "No traffic on any rule in the last " + Math.round((v.span || 300) / 60) + " min."));
    } else {
      fill("rates", ...v.rules.map((r) => chart(r, v.span || 300)));
    }
    const more = [];
    if (v.more) more.push(v.more + " quieter rules not shown.");
    if (v.uncharted) more.push(v.uncharted + " rules with traffic are not charted (too many rules).");
    fill("rates-more", more.join(" "));
  }

  // ---- hot keys --------------------------------------------------------

  function descriptorText(entries) {
    return (entries || []).map((e) => e.key + "=" + e.value).join(", ");
  }

  function hotTable(caption, entries) {
    if (!entries || !entries.length) return el("p", "muted", caption + ": none.");
    const head = el("tr", null, el("th", null, "rule"), el("th", null, "descriptor"), el("th", "num", "hits"),
      el("th", "num", "refused"), el("th", "num", "limit"), el("th", "num", "remaining"), el("th", "num", "reset"),
      el("th", "num", "used"));
    const rows = entries.map((e) => el("tr", null,
      el("td", null, el("code", null, e.rule), e.file ? el("div", "where", e.file + ":" + e.line) : null),
      el("td", null, el("code", "value", descriptorText(e.descriptor))),
      el("td", "num", fmtNum(e.hits)), el("td", "num", fmtNum(e.refused)),
      el("td", "num", e.algorithm === "concurrency" ? fmtNum(e.limit) + " at once" : fmtNum(e.limit) + " / " + (e.window || "")),
      el("td", "num", fmtNum(e.remaining)),
      el("td", "num", e.reset || ""), el("td", "num", e.used === undefined ? "" : Math.round(e.used * 100) + "%")));
    return el("div", null, el("h3", null, caption), el("table", null, el("thead", null, head), el("tbody", null, ...rows)));
  }

  // hotkeysInto fills the element id with res, an answer of /hotkeys: the
  // paragraph intro(h) gives, then each domain's lists (the empty ones
  // left out with skipEmpty), or the paragraph none without any domain.
  function hotkeysInto(id, res, intro, skipEmpty, none) {
    if (res.status === 404) {
      fill(id, el("p", "notavail", "Hot keys are not available on this server."));
      return;
    }
    if (res.status !== 200) {
      fill(id, el("p", "error", "GET /hotkeys: " + res.status + " " + res.body));
      return;
    }
    const h = res.body;
    const kids = [intro(h)];
    for (const d of h.domains || []) {
      kids.push(el("div", "domain", "domain ", el("code", null, d.domain)));
      if (!skipEmpty || d.refused.length) kids.push(hotTable("Most refused", d.refused));
      if (!skipEmpty || d.nearest.length) kids.push(hotTable("Nearest their limit", d.nearest));
    }
    if (!(h.domains || []).length && none) kids.push(none);
    fill(id, ...kids);
  }

  function renderHotkeys(res) {
    hotkeysInto("hotkeys", res, (h) => el("p", "muted", "This replica's view" + (h.replica ? " (" + h.replica + ")" : "") +
      ", over the last " + h.window_seconds + " s; values " + (h.values === "shown" ? "shown" : "as keyed digests (" +
      (h.digest_key === "random" ? "a key of this process's own" : "key " + h.digest_key_id) + "): find a value above") + "."),
    false, el("p", "muted", "No traffic yet."));
  }

  // findValue asks /hotkeys for the counters that hold the value typed:
  // the digests hide values, and only the server holds their key.
  async function findValue(ev) {
    ev.preventDefault();
    const value = document.getElementById("hotkeys-value").value;
    if (!value) {
      fill("hotkeys-found");
      return;
    }
    fill("hotkeys-found", el("p", "muted", "looking…"));
    try {
      const res = await getJSON("../hotkeys?value=" + encodeURIComponent(value));
      hotkeysInto("hotkeys-found", res, (h) => el("p", null, el("code", "value", value), " shows as ", el("code", "value", h.lookup.value),
        ": " + (h.lookup.found ? fmtNum(h.lookup.found) + " entries below." : "in no list now.")), true, null);
    } catch (e) {
      fill("hotkeys-found", el("p", "error", "GET /hotkeys failed: " + e));
    }
  }

  // ---- explain ---------------------------------------------------------

  // prefillExplain puts in the form a request that the rule whose levels
  // are path would match.
  function prefillExplain(domain, path) {
    const entries = path.map((r) => ({ key: r.key, value: r.value && !r.wildcard ? r.value : "example" }));
    const body = { domain: domain, descriptors: [{ entries: entries }] };
    document.getElementById("explain-body").value = JSON.stringify(body, null, 2);
  }

  // wouldAdmit says whether the limit l would admit the request, and when
  // it would if not.
  function wouldAdmit(l) {
    if (!l) return "";
    if (l.replaced) return "replaced by another limit";
    if (l.would_admit) return "yes";
    return l.retry_after ? "no, retry after " + l.retry_after : "no";
  }

  function explainTable(x) {
    const head = el("tr", null, el("th", null, "descriptor"), el("th", null, "rule"), el("th", null, "decision"),
      el("th", null, "limit"), el("th", null, "counter"), el("th", "num", "remaining"), el("th", "num", "reset"),
      el("th", null, "would admit"));
    const rows = [];
    for (const d of x.descriptors || []) {
      const rule = d.rule ? el("div", null, el("code", null, d.rule.path), el("div", "where", d.rule.file + ":" + d.rule.line)) : "no rule";
      const ro = d.runtime_override;
      if (ro) {
        rule.appendChild(el("div", "where", "limits from the runtime override v" + ro.version + " by " + ro.set_by + ": " + ro.reason +
          (ro.expires_at ? ", until " + ro.expires_at : "")));
      }
      const modes = [d.unlimited ? "unlimited" : "", d.shadow_mode ? "shadow" : "", d.quota_mode ? "quota" : ""].filter(Boolean).join(", ");
      const limits = d.limits && d.limits.length ? d.limits : [null];
      limits.forEach((l, i) => {
        rows.push(el("tr", null,
          el("td", null, i === 0 ? el("code", "value", descriptorText(d.entries)) : null),
          el("td", null, i === 0 ? rule : null),
          el("td", d.decision === "OVER_LIMIT" ? "bad" : "good", i === 0 ? d.decision + (modes ? " (" + modes + ")" : "") : null),
          el("td", null, l ? rateText(l.requests_per_unit, l.window, l.algorithm) +
            (l.burst && l.algorithm !== "concurrency" ? " burst " + fmtNum(l.burst) : "") +
            (l.held !== undefined ? ", " + fmtNum(l.held) + " held" + (l.next_lease_expiry ? ", next lapses in " + l.next_lease_expiry : "") : "") +
            (l.name ? " (" + l.name + ")" : "") : ""),
          el("td", null, l ? el("code", null, l.counter) : null),
          el("td", "num", l ? fmtNum(l.remaining) : ""),
          el("td", "num", l ? l.reset : ""),
          el("td", null, wouldAdmit(l))));
      });
    }
    return el("div", null,
      el("p", null, "Domain ", el("code", null, x.domain), ": ", el("span", x.overall === "OVER_LIMIT" ? "bad" : "good", x.overall)),
      el("table", null, el("thead", null, head), el("tbody", null, ...rows)));
  }

  async function explain(ev) {
    ev.preventDefault();
    const box = fill("explain", el("p", "muted", "asking…"));
    try {
      const res = await getJSON("../explain", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: document.getElementById("explain-body").value,
      });
      if (res.status === 404) {
        fill("explain", el("p", "notavail", "Explain is not available on this server."));
      } else if (res.status !== 200) {
        fill("explain", el("p", "error", res.status + ": " + res.body));
      } else {
        fill("explain", explainTable(res.body));
      }
    } catch (e) {
      box.replaceChildren(el("p", "error", "POST /explain failed: " + e));
    }
  }

  // ---- runtime overrides -----------------------------------------------

  function overrideLimitText(l) {
    let t = l.algorithm === "concurrency" ? fmtNum(l.requests_per_unit) + " at once, lease " + (l.unit || l.window)
      : fmtNum(l.requests_per_unit) + " / " + (l.unit || l.window);
    if (l.algorithm) t += " " + l.algorithm;
    if (l.burst) t += " burst " + fmtNum(l.burst);
    if (l.name) t += " (" + l.name + ")";
    return t;
  }

  function renderOverrides(res) {
    if (res.status !== 200) {
      fill("overrides", el("p", "muted", "not available (" + res.status + ")"));
      return;
    }
    const v = res.body;
    if (!v.overrides.length) {
      fill("overrides", el("p", "muted", "none"));
      return;
    }
    const head = el("tr", null, ...["domain", "descriptor", "limits", "reason", "set by", "version", "expires"].map((h) => el("th", null, h)));
    const rows = v.overrides.map((o) => {
      const desc = el("td", null, el("code", "value", descriptorText(o.entries)));
      if (o.unmatched) desc.appendChild(el("span", "badge shadow", "unmatched"));
      return el("tr", null,
        el("td", null, el("code", null, o.domain)), desc,
        el("td", null, o.limits.map(overrideLimitText).join(", ")),
        el("td", null, o.reason), el("td", null, o.set_by), el("td", null, String(o.version)),
        el("td", null, o.expires_at || "never"));
    });
    const more = v.total > v.overrides.length ? el("p", "muted", fmtNum(v.total - v.overrides.length) + " more not shown (GET /v1/overrides lists them all)") : null;
    fill("overrides", el("table", null, el("thead", null, head), el("tbody", null, ...rows)), more);
  }

  // ---- polling ---------------------------------------------------------

  let polls = 0;

  async function poll() {
    const errors = [];
    const step = async (name, f) => {
      try {
        await f();
      } catch (e) {
        errors.push(name + ": " + e);
      }
    };
    await step("status", async () => {
      const r = await getJSON("api/status");
      if (r.status !== 200) throw new Error(r.status + " " + r.body);
      renderStatus(r.body);
    });
    if (polls % RULES_EVERY === 0 || !rulesSig) {
      await step("rules", async () => {
        const r = await getJSON("api/rules");
        if (r.status !== 200) throw new Error(r.status + " " + r.body);
        renderRules(r.body);
      });
    }
    await step("rates", async () => {
      const r = await getJSON("api/rates?limit=24");
      if (r.status !== 200) throw new Error(r.status + " " + r.body);
      renderRates(r.body);
    });
    await step("hot keys", async () => renderHotkeys(await getJSON("../hotkeys")));
    if (polls % RULES_EVERY === 0) {
      await step("overrides", async () => renderOverrides(await getJSON("api/overrides")));
    }
    polls++;
    const when = "updated " + new Date().toLocaleTimeString();
    if (errors.length) {
      fill("updated", el("span", "error", errors.join("; ")), " ", when);
    } else {
      fill("updated", when);
    }
    setTimeout(poll, POLL_MS);
  }

  document.getElementById("explain-form").addEventListener("submit", explain);
  document.getElementById("hotkeys-find").addEventListener("submit", findValue);
  poll();
})();
