// Every htmx request carries the page's CSRF token, as the server demands
// for anything that is not a GET.
document.addEventListener("htmx:config:request", function (event) {
  var meta = document.querySelector('meta[name="csrf-token"]');
  if (meta) event.detail.ctx.request.headers["X-CSRF-Token"] = meta.content;
});

// atelierURL builds every address a script asks for, by the same rule as
// the server's views.URL: base is a path the page wrote itself, each segment
// is escaped as one path segment, and query values (a file's path) go
// through URLSearchParams, so "b+c.txt" or "a&path=x" stay one value.
//   atelierURL(base, ["file"], { path: "src/b+c.txt" })
window.atelierURL = function (base, segments, query) {
  let url = String(base || "").replace(/\/+$/, "");
  for (const s of segments || []) url += "/" + encodeURIComponent(String(s));
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) params.append(k, String(v));
  const q = params.toString();
  return (url || "/") + (q ? "?" + q : "");
};
