// Every htmx request carries the page's CSRF token, as the server demands
// for anything that is not a GET.
document.addEventListener("htmx:config:request", function (event) {
  var meta = document.querySelector('meta[name="csrf-token"]');
  if (meta) event.detail.ctx.request.headers["X-CSRF-Token"] = meta.content;
});
