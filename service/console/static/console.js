// vmledger console: the token lives in this tab's sessionStorage only; every fragment is
// fetched with it (Authorization: Bearer) and inserted into the page. No framework, no build.
"use strict";

const TOKEN_KEY = "vmledger.console.token";

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function headers() {
  const found = { Accept: "text/html" };
  const bearer = token();
  if (bearer) found.Authorization = `Bearer ${bearer}`;
  return found;
}

// The API's error body ({code, message, errors?}) as one line, whatever the status: each of
// its errors names the field refused and why ("server_uuid: Invalid UUID").
function describe(status, text) {
  try {
    const body = JSON.parse(text);
    const fields = (Array.isArray(body.errors) ? body.errors : [])
      .map((error) => `${error.field}: ${error.message || error.code}`);
    return `${status} ${body.code}: ${body.message}` + (fields.length ? ` (${fields.join("; ")})` : "");
  } catch (_) {
    return `${status}: ${text.slice(0, 200)}`;
  }
}

// The heading of a page whose fragment was refused: what the refusal means to the reader (a
// VM's page for a uuid no VM has, or one the token may not see, is "Not found"), which the
// tab's title names too. The error's own line follows it.
const REFUSALS = { 403: "Not allowed", 404: "Not found", 400: "Refused", 409: "Refused",
                   422: "Refused" };

let pageTitle = null;  // the shell's title, given back when the page loads after all

function heading(status) {
  const title = REFUSALS[status] || "This page could not be loaded";
  const element = document.createElement("h1");
  element.textContent = title;
  pageTitle = pageTitle || document.title;
  document.title = `${title} · vmledger console`;
  return element;
}

// The request each target is waiting on: a newer load of the same target aborts it, so only
// the latest request writes its target (the slider stepped twice quickly showed the first
// version it asked for if that answer came last).
const loading = new WeakMap();

// Fetch a fragment into target; on 401 ask for a token. Resolves to the response status
// (0 when it did not answer, or a newer load of the same target took its place).
async function load(url, target, method = "GET") {
  if (loading.has(target)) loading.get(target).abort();
  const controller = new AbortController();
  loading.set(target, controller);
  target.setAttribute("aria-busy", "true");
  let status = 0;
  try {
    const response = await fetch(url, { method, headers: headers(), signal: controller.signal });
    const text = await response.text();
    if (controller.signal.aborted) return 0;  // a newer load of target answers instead
    status = response.status;
    if (status === 401) {
      const tried = token() !== null;
      sessionStorage.removeItem(TOKEN_KEY);  // unknown, or no longer configured
      showLogin(tried ? describe(status, text) : null);  // no token yet: just the form
    } else if (!response.ok) {
      const problem = document.createElement("p");
      problem.className = "error";
      problem.dataset.testid = "error";
      problem.textContent = describe(status, text);
      target.replaceChildren(...(target.id === "content" ? [heading(status)] : []), problem);
    } else {
      target.innerHTML = text;
      if (target.id === "content" && pageTitle) document.title = pageTitle;
      wire(target);
      target.dispatchEvent(new CustomEvent("console:loaded"));
    }
  } catch (error) {
    if (controller.signal.aborted) return 0;
    target.textContent = `The service did not answer: ${error}`;
  } finally {
    if (loading.get(target) === controller) {
      loading.delete(target);
      target.removeAttribute("aria-busy");
      target.dataset.status = String(status);
    }
  }
  return status;
}

function formUrl(form, submitter) {
  const params = new URLSearchParams(new FormData(form, submitter));
  for (const [name, value] of [...params]) if (value === "") params.delete(name);
  return `${form.getAttribute("action")}?${params}`;
}

// Give a freshly inserted fragment its behaviour.
function wire(root) {
  for (const element of root.querySelectorAll("[data-load]")) {
    load(element.dataset.load, element);
  }
  for (const form of root.querySelectorAll("form[data-into]")) {
    const target = document.querySelector(form.dataset.into);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      load(formUrl(form, event.submitter), target, (form.getAttribute("method") || "get").toUpperCase());
    });
  }
  // A filter form navigates to its page's address without the fields left empty.
  for (const form of root.querySelectorAll("form[data-navigate]")) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      window.location.assign(formUrl(form, event.submitter));
    });
  }
  for (const stepper of root.querySelectorAll("form.stepper")) wireStepper(stepper);
  const live = root.querySelector("[data-live]");
  if (live) follow(live.dataset.live, document.getElementById("live"));
  for (const logout of root.querySelectorAll("#logout")) {
    logout.addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin("Signed out.");  // which stops the live feed: it was read with the token
    });
  }
}

// The version slider: dragging, the arrows, and a timeline entry's "show" all load the VM
// object as it was at that version. data-hidden lists the runs of versions the viewer may
// not see ("10-12,40-41": an owner's VM while it was quarantined); the slider steps over them.
function wireStepper(stepper) {
  const slider = stepper.querySelector("input[type=range]");
  const output = stepper.querySelector("output");
  const target = document.querySelector(stepper.dataset.into);
  const hidden = (stepper.dataset.hidden || "").split(",").filter(Boolean)
    .map((run) => run.split("-").map(Number));
  let shown = Number(slider.value);
  // Whatever loaded the object (the slider, an instant, a timeline entry), the slider and its
  // output name the version shown: after an instant they still named the one before, and ◀
  // stepped from there. (The version the slider asked for leaves it be, as it may be moving.)
  target.addEventListener("console:loaded", () => {
    const loaded = target.querySelector("[data-testid=state-version]");
    if (!loaded || Number(loaded.dataset.version) === shown) return;
    slider.value = loaded.dataset.version;
    shown = Number(slider.value);
    output.textContent = slider.value;
  });
  // the nearest version the viewer may see from version, moving in direction (-1 or 1)
  const seeable = (version, direction) => {
    for (const [low, high] of hidden) {
      if (version >= low && version <= high) {
        return direction < 0 && low > Number(slider.min) ? low - 1 : high + 1;
      }
    }
    return version;
  };
  const show = () => {
    slider.value = String(seeable(Number(slider.value), Number(slider.value) - shown));
    shown = Number(slider.value);
    output.textContent = slider.value;
    load(formUrl(stepper), target);
  };
  slider.addEventListener("input", () => { output.textContent = slider.value; });
  slider.addEventListener("change", show);
  for (const button of stepper.querySelectorAll("[data-step]")) {
    button.addEventListener("click", () => {
      slider.value = String(Number(slider.value) + Number(button.dataset.step));
      show();
    });
  }
  for (const link of document.querySelectorAll("a.show[data-version]")) {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      slider.value = link.dataset.version;
      show();
      target.scrollIntoView({ block: "nearest" });
    });
  }
}

// Live updates: the page's fragment names the changefeed it shows (data-live: GET /changes
// after the log position it was rendered at); the script follows it with fetch, so the token
// goes in the Authorization header and never in a URL, counts the changes the page does not
// show yet, and "refresh" loads the fragment again. A role the feed refuses sees no counter.
// When a stream ends (the service's cut, a restart) or cannot be opened (connection refused,
// 503 at the stream limit, a 408 or 429), the script resumes after the last position it saw,
// keeping the count, 1 s later and then twice as long after each failure, up to 30 s apart;
// meanwhile the counter says it is reconnecting (the count may be behind), never a silently
// stale number.
const RESUME_MS = 1000;
const MAX_RESUME_MS = 30000;
let following = null;  // the feed followed: {controller, timer, after, unseen, delay}

// A refusal that asking again cannot overcome: any 4xx but 408 (Request Timeout) and 429
// (Too Many Requests), which say to ask again later: a role the feed refuses or a token no
// longer known (401, 403), an `after` refused or expired (400, 404, 422). The counter is
// hidden then and the feed not resumed; a 5xx or a network error is retried.
function refusedForGood(status) {
  return status >= 400 && status < 500 && status !== 408 && status !== 429;
}

function showCount(indicator, feed) {
  indicator.querySelector("[data-testid=live-count]").textContent = String(feed ? feed.unseen : 0);
}

// The counter following its feed (stale false) or trying to resume it (stale true).
function markStale(indicator, stale) {
  indicator.hidden = false;
  indicator.toggleAttribute("data-stale", stale);
  indicator.querySelector("[data-testid=live-state]").hidden = !stale;
}

// Stop following the feed (its fetch aborted, a resume not yet started cancelled) and hide
// the counter.
function stopFollowing() {
  if (following) {
    following.controller.abort();
    clearTimeout(following.timer);
  }
  following = null;
  const indicator = document.getElementById("live");
  markStale(indicator, false);
  indicator.hidden = true;
  showCount(indicator, null);
}

// Follow the feed of a page just loaded (or refreshed): it counts from 0.
function follow(url, indicator) {
  stopFollowing();
  const feed = following = { controller: new AbortController(), timer: null, after: null,
                             unseen: 0, delay: RESUME_MS };
  read(feed, url, indicator);
}

async function read(feed, url, indicator) {
  try {
    const response = await fetch(url, { headers: { ...headers(), Accept: "text/event-stream" },
                                        signal: feed.controller.signal });
    if (refusedForGood(response.status)) {
      indicator.hidden = true;
      return;
    }
    if (response.ok) {
      markStale(indicator, false);
      showCount(indicator, feed);
      feed.delay = RESUME_MS;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const lines = buffer.slice(0, end).split("\n");
          buffer = buffer.slice(end + 2);
          const id = lines.find((line) => line.startsWith("id:"));
          if (!id) continue;  // the opening frame, heartbeats
          feed.after = id.slice(3).trim();
          if (lines.includes("event: cut")) continue;  // the service ended the stream
          feed.unseen += 1;
          showCount(indicator, feed);
        }
      }
    }
  } catch (error) {
    if (error.name === "AbortError") return;
  }
  if (following !== feed) return;
  markStale(indicator, true);
  const next = new URL(url, window.location.href);
  if (feed.after !== null) next.searchParams.set("after", feed.after);
  feed.timer = setTimeout(() => {
    if (following === feed) read(feed, next.pathname + next.search, indicator);
  }, feed.delay);
  feed.delay = Math.min(feed.delay * 2, MAX_RESUME_MS);
}

// The sign-in form, in place of the page (signed out, or the token refused).
function showLogin(message) {
  stopFollowing();
  const login = document.getElementById("login");
  const error = document.getElementById("login-error");
  // a page's data is hidden; the not-found page's message holds none, and stays
  const content = document.getElementById("content");
  if (content.dataset.fragment) content.hidden = true;
  document.getElementById("session").replaceChildren();
  login.hidden = false;
  error.hidden = !message;
  error.textContent = message || "";
  login.querySelector("input").focus();
}

async function start() {
  const content = document.getElementById("content");
  const status = await load("/console/fragments/session", document.getElementById("session"));
  if (status !== 200) return;
  // the navigation offers only the pages the role may see (console.css)
  document.body.dataset.role = document.querySelector("#session [data-role]").dataset.role;
  document.getElementById("login").hidden = true;
  content.hidden = false;
  if (content.dataset.fragment) await load(content.dataset.fragment, content);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelector("#live button").addEventListener("click", () => {
    const content = document.getElementById("content");
    if (content.dataset.fragment) load(content.dataset.fragment, content);
  });
  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const field = event.target.elements.token;
    sessionStorage.setItem(TOKEN_KEY, field.value.trim());
    field.value = "";
    start();
  });
  start();
});
