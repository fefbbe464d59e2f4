// mara serve (docs/commands.md, "serve"): keeps a running run's page current through the run's
// event stream, and sends the two actions with a token typed on the page. A token typed once is
// kept for this tab only (sessionStorage: no cookie, nothing another tab or site sees) and sent
// as a bearer token. On a server beyond loopback, which answers a page without a token with one
// that asks for it, the pages themselves are fetched with it and shown in place. Every value from
// the server goes into the page as text, never as HTML.
"use strict";

(function () {
  const KEY = "mara-serve-token";
  const kept = () => sessionStorage.getItem(KEY);
  const keep = (token) => sessionStorage.setItem(KEY, token);
  const bearer = (token) => (token ? { Authorization: "Bearer " + token } : {});
  // What stops the stream of the page shown, when another takes its place.
  let stopStream = () => {};

  // A page of this server fetched with the kept token and shown in place of this one; `push`:
  // a new entry in the tab's history. A refusal (401) is shown too: the page that asks again.
  const load = async (url, push) => {
    let response;
    try {
      response = await fetch(url, { headers: bearer(kept()) });
    } catch (error) {
      const said = document.getElementById("token-said");
      if (said) said.textContent = String(error);
      return;
    }
    if (response.status === 401) sessionStorage.removeItem(KEY);
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    stopStream();
    document.title = page.title;
    document.body.replaceWith(document.adoptNode(page.body));
    if (push) history.pushState(null, "", url);
    start();
  };

  // The form of the page that asks for a token.
  const asking = () => {
    const form = document.getElementById("token-form");
    if (!form) return;
    form.addEventListener("submit", (submitted) => {
      submitted.preventDefault();
      const input = form.querySelector("input[name=token]");
      keep(input.value.trim());
      input.value = "";
      load(location.href, false);
    });
  };

  // On a server where reading needs the token, links and the list's filter are followed by
  // fetching with it.
  const following = () => {
    if (document.body.dataset.guarded !== "true") return;
    document.body.addEventListener("click", (clicked) => {
      const link = clicked.target.closest("a[href]");
      if (!link || link.origin !== location.origin || clicked.ctrlKey || clicked.metaKey) return;
      if (link.pathname.startsWith("/assets/")) return;
      clicked.preventDefault();
      load(link.href, true);
    });
    for (const form of document.querySelectorAll("form.filter")) {
      form.addEventListener("submit", (submitted) => {
        submitted.preventDefault();
        const query = new URLSearchParams(new FormData(form)).toString();
        load(form.action.split("?")[0] + (query ? "?" + query : ""), true);
      });
    }
  };

  // `text` into `element` as mara's messages have it: what is between backquotes (a command, an
  // id) as code, a recorded instant as a time (shown in the viewer's zone); every part as text,
  // never as HTML.
  const INSTANT = /(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)/;
  const prose = (element, text) => {
    element.replaceChildren();
    String(text).split("`").forEach((part, i) => {
      if (i % 2 === 1) {
        const code = document.createElement("code");
        code.textContent = part;
        element.append(code);
        return;
      }
      part.split(INSTANT).forEach((piece, k) => {
        if (k % 2 === 1) {
          const time = document.createElement("time");
          time.dateTime = piece;
          time.textContent = piece;
          element.append(time);
        } else if (piece) {
          element.append(document.createTextNode(piece));
        }
      });
    });
    localTimes(element);
  };

  // What an action came to, said at the top of the page: `what` and the server's words.
  const say = (what, text, kind) => {
    const said = document.getElementById("said");
    if (!said) return;
    const head = document.createElement("strong");
    prose(head, what + ": ");
    const body = document.createElement("span");
    prose(body, text);
    said.replaceChildren(head, body);
    said.className = kind;
    said.hidden = false;
  };

  // The parts of the page an action changes (`data-refresh`: the stacks' table, a run's actions)
  // read again from the server and put in place: an unlocked stack's row says so at once.
  const refresh = async () => {
    const response = await fetch(location.href, { headers: bearer(kept()) });
    if (!response.ok) return;
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const part of document.querySelectorAll("[data-refresh]")) {
      const fresh = page.querySelector('[data-refresh="' + CSS.escape(part.dataset.refresh) + '"]');
      if (fresh) part.replaceWith(document.adoptNode(fresh));
    }
    localTimes(document);
    acting();
  };

  // The actions: the token kept for the tab, else the one typed (kept once it is taken).
  const acting = () => {
    for (const form of document.querySelectorAll("form.action:not([data-bound])")) {
      form.dataset.bound = "true";
      form.hidden = false;
      const input = form.querySelector("input[name=token]");
      if (kept()) {
        input.hidden = true;
        input.required = false;
      }
      form.addEventListener("submit", async (submitted) => {
        submitted.preventDefault();
        const what = form.dataset.what || "The action";
        const token = input.value.trim() || kept();
        say(what, "…", "pending");
        try {
          const response = await fetch(form.dataset.url, {
            method: "POST",
            headers: Object.assign({ "Mara-Via": "page" }, bearer(token)),
          });
          const body = await response.json().catch(() => ({}));
          say(what, body.message || body.error || response.statusText, response.ok ? "done" : "refused");
          if (response.ok) {
            keep(token);
            input.value = "";
            await refresh();
          } else if (response.status === 401 || response.status === 403) {
            // Another token, an operator's, may be typed.
            input.hidden = false;
            input.required = true;
          }
        } catch (error) {
          say(what, String(error), "refused");
        }
      });
    }
  };

  // Every recorded instant (`<time datetime>`, which the server says in UTC) in the viewer's own
  // time zone, the zone said: `2026-11-26 05:42:41 GMT+1`; the instant as recorded on hover.
  const localTimes = (root) => {
    const format = new Intl.DateTimeFormat(undefined, {
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
      second: "2-digit", hourCycle: "h23", timeZoneName: "short",
    });
    for (const time of root.querySelectorAll("time[datetime]")) {
      const instant = new Date(time.dateTime);
      if (Number.isNaN(instant.getTime())) continue;
      const part = Object.fromEntries(format.formatToParts(instant).map((p) => [p.type, p.value]));
      time.textContent = part.year + "-" + part.month + "-" + part.day + " " + part.hour + ":" +
        part.minute + ":" + part.second + " " + part.timeZoneName;
      time.title = time.dateTime;
    }
  };

  // The Server-Sent Events at `url`, each given to its handler by name: an EventSource where
  // reading needs no token; else read through fetch, which sends it. Returns what stops it.
  const listen = (url, handlers) => {
    if (document.body.dataset.guarded !== "true") {
      const source = new EventSource(url);
      for (const [name, handle] of Object.entries(handlers)) {
        source.addEventListener(name, (event) => handle(event.data));
      }
      return () => source.close();
    }
    const controller = new AbortController();
    (async () => {
      const response = await fetch(url, { headers: bearer(kept()), signal: controller.signal });
      if (!response.ok || !response.body) return;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let name = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) name = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
          }
          if (data.length && handlers[name]) handlers[name](data.join("\n"));
        }
      }
    })().catch(() => {});
    return () => controller.abort();
  };

  // A running run's page, kept current.
  const live = () => {
    const run = document.body.dataset.run;
    if (!run || document.body.dataset.live !== "true") return;

    const byProject = (selector) => {
      const found = new Map();
      for (const element of document.querySelectorAll(selector)) {
        found.set(element.dataset.project, element);
      }
      return found;
    };
    const rows = byProject("tr[data-project]");
    const nodes = byProject("g.node[data-project]");
    const logs = byProject("pre.log[data-project]");

    const svgNS = "http://www.w3.org/2000/svg";
    const make = (ns, name, attributes, text) => {
      const element = ns ? document.createElementNS(ns, name) : document.createElement(name);
      for (const [key, value] of Object.entries(attributes || {})) {
        element.setAttribute(key, String(value));
      }
      if (text !== undefined) element.textContent = text;
      return element;
    };
    const logLink = (path) =>
      "/runs/" + encodeURIComponent(run) + "/log?project=" + encodeURIComponent(path);

    // A project that started after the page was rendered: its row and its log.
    const addProject = (path) => {
      const tbody = document.querySelector("table.projects tbody");
      if (tbody) {
        const row = make(null, "tr", { "data-project": path });
        const name = make(null, "td");
        const runs = make(null, "a", { class: "runs", href: "/projects/" + path.split("/").map(encodeURIComponent).join("/"), title: "This project's runs" }, "runs");
        name.append(make(null, "a", { href: logLink(path) }, path), " ", runs);
        row.append(
          name,
          make(null, "td", { class: "status-cell" }),
          make(null, "td", { class: "num duration" }),
          make(null, "td", { class: "changes" }),
          make(null, "td", { class: "reason" }),
        );
        tbody.append(row);
        rows.set(path, row);
      }
      const section = document.getElementById("logs");
      if (section) {
        const details = make(null, "details", { open: "" });
        const summary = make(null, "summary", {}, path + " ");
        summary.append(make(null, "a", { href: logLink(path) }, "(own page)"));
        const pre = make(null, "pre", { class: "log", "data-project": path, "data-lines": 0 });
        details.append(summary, pre);
        section.append(details);
        logs.set(path, pre);
      }
    };

    // The graph drawn again from the server's drawing (`svg::Drawing`), as the server draws it:
    // the critical path's edges over the others, each box's path over its lines.
    const redraw = (drawing) => {
      const old = document.querySelector("svg.graph");
      if (!old) return;
      const box = "0 0 " + drawing.width + " " + drawing.height;
      const svg = make(svgNS, "svg", {
        class: "graph", role: "img", width: drawing.width, height: drawing.height, viewBox: box,
      });
      svg.append(make(svgNS, "title", {}, "The run's projects and the order between them"));
      const defs = make(svgNS, "defs");
      for (const [id, kind] of [["arrow", "arrowhead"], ["arrow-critical", "arrowhead critical"]]) {
        const marker = make(svgNS, "marker", {
          id, viewBox: "0 0 10 10", refX: 10, refY: 5, markerUnits: "userSpaceOnUse",
          markerWidth: 10, markerHeight: 10, orient: "auto-start-reverse",
        });
        marker.append(make(svgNS, "path", { d: "M 0 0 L 10 5 L 0 10 z", class: kind }));
        defs.append(marker);
      }
      svg.append(defs);
      const path = drawing.critical || [];
      const steps = new Set(path.slice(1).map((to, i) => path[i] + ">" + to));
      const critical = drawing.edges.map(([from, to]) => steps.has(from + ">" + to));
      const edge = (i) => make(svgNS, "path", critical[i]
        ? { class: "edge critical", "marker-end": "url(#arrow-critical)", d: drawing.curves[i] }
        : { class: "edge", "marker-end": "url(#arrow)", d: drawing.curves[i] });
      drawing.curves.forEach((_, i) => { if (!critical[i]) svg.append(edge(i)); });
      drawing.curves.forEach((_, i) => { if (critical[i]) svg.append(edge(i)); });
      nodes.clear();
      drawing.nodes.forEach((node, k) => {
        const g = make(svgNS, "g", { class: "node " + node.status, "data-project": node.path });
        const rect = { x: node.x, y: node.y, width: node.width, height: node.height, rx: 5 };
        if (path.includes(k)) rect.class = "critical";
        // svg.rs's PAD_X, PAD_Y + ASCENT and LINE.
        const text = make(svgNS, "text", { x: node.x + 10, y: node.y + 8 + 11 });
        node.lines.forEach((line, i) => {
          text.append(make(svgNS, "tspan", { x: node.x + 10, dy: i === 0 ? 0 : 15 }, line));
        });
        g.append(make(svgNS, "title", {}, node.path + " — " + node.status), make(svgNS, "rect", rect), text);
        svg.append(g);
        nodes.set(node.path, g);
      });
      old.replaceWith(svg);
    };

    const badge = (cell, shown, words) => {
      const span = document.createElement("span");
      span.className = "status " + shown;
      span.textContent = words || shown;
      cell.replaceChildren(span);
    };

    const handlers = {};

    handlers.graph = (data) => redraw(JSON.parse(data));

    handlers.project = (data) => {
      const p = JSON.parse(data);
      if (!rows.has(p.path)) addProject(p.path);
      const row = rows.get(p.path);
      if (row) {
        badge(row.querySelector(".status-cell"), p.shown);
        row.querySelector(".duration").textContent = p.duration;
        row.querySelector(".changes").textContent = p.changes;
        row.querySelector(".reason").textContent = p.reason || "";
      }
      // A project that starts (or fails) shows its log, as the page shows such a project's when
      // it is rendered; one waiting when the page was rendered had it folded.
      const pre = logs.get(p.path);
      const details = pre && pre.closest("details");
      if (details && ["running", "failed", "drifted"].includes(p.shown)) details.open = true;
      const node = nodes.get(p.path);
      if (node) {
        node.setAttribute("class", "node " + p.shown);
        const title = node.querySelector("title");
        if (title) title.textContent = p.path + " — " + p.shown;
      }
    };

    handlers.log = (data) => {
      const l = JSON.parse(data);
      // A line of a project whose start this page has not heard of yet.
      if (!logs.has(l.project)) addProject(l.project);
      const pre = logs.get(l.project);
      if (!pre) return;
      const shown = Number(pre.dataset.lines || 0);
      if (l.n <= shown) return;
      pre.append(document.createTextNode(l.line + "\n"));
      pre.dataset.lines = String(l.n);
    };

    handlers.run = (data) => {
      const r = JSON.parse(data);
      const status = document.getElementById("run-status");
      if (status) badge(status, r.shown, r.result);
      const duration = document.getElementById("run-duration");
      if (duration) duration.textContent = r.duration;
      if (r.status !== "running") {
        stopStream();
        document.body.dataset.live = "false";
        for (const form of document.querySelectorAll("form.action[data-url$='/cancel']")) {
          form.remove();
        }
      }
    };

    stopStream = listen("/api/runs/" + encodeURIComponent(run) + "/events", handlers);
  };

  // Everything the page shown does.
  const start = () => {
    localTimes(document);
    asking();
    following();
    acting();
    live();
  };

  window.addEventListener("popstate", () => {
    if (document.body.dataset.guarded === "true") load(location.href, false);
  });

  // The page that asks for a token, opened in a tab that has one: the page asked for, with it.
  if (document.getElementById("token-form") && kept()) {
    load(location.href, false);
  } else {
    start();
  }
})();
