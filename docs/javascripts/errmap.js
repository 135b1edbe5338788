// Opened from the file system (file://) the theme's search cannot load its index: say so where
// the search box and the page would otherwise leave the reader looking for it, in the site's language
// (the <meta> the docs hook, errmap/commands/docs.py, writes from the message catalogue).
(function () {
  if (location.protocol !== "file:") return;
  var meta = document.querySelector('meta[name="errmap-no-search"]');
  if (!meta) return;
  var says = meta.content;
  function note() {
    var article = document.querySelector("article");
    if (article && !document.querySelector(".errmap-no-search")) {
      var p = document.createElement("p");
      p.className = "errmap-no-search admonition warning";
      p.textContent = says;
      article.insertBefore(p, article.firstChild);
    }
    document.querySelectorAll(".md-search__input").forEach(function (box) {
      box.placeholder = meta.dataset.placeholder;
      box.title = says;
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", note);
  else note();
})();
