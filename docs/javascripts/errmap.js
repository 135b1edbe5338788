// Opened from the file system (file://) the theme's search cannot load its index: say so where
// the search box and the page would otherwise leave the reader looking for it.
(function () {
  if (location.protocol !== "file:") return;
  var says = "Search needs the site served over HTTP: run `errmap docs serve` and open http://127.0.0.1:8000/";
  function note() {
    var article = document.querySelector("article");
    if (article && !document.querySelector(".errmap-no-search")) {
      var p = document.createElement("p");
      p.className = "errmap-no-search admonition warning";
      p.textContent = says;
      article.insertBefore(p, article.firstChild);
    }
    document.querySelectorAll(".md-search__input").forEach(function (box) {
      box.placeholder = "Search needs errmap docs serve";
      box.title = says;
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", note);
  else note();
})();
