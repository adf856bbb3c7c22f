/* The book's two editions, English and 中文, and a link on every page to the same page in the other.
 *
 * Why: the Chinese edition (book/editions.py) is the same build with the catalogs applied, written to zh/ inside
 * the English one, so every page has its twin at the same path below the other edition's root.  The link is
 * computed here from the page's own address and Sphinx's content root (data-content_root), which works on a
 * server and on file:// pages alike.  The reader's edition is remembered (localStorage): opening an English page
 * after choosing 中文 goes to its Chinese twin, and the other way round.  Choosing an edition also sets the
 * cards' language (pk-lang.js's key), so the Chinese edition's cards open in Chinese; a card's own English / 中文
 * switch changes the cards only, not the edition.  Only a build of both editions loads this file (editions.py adds
 * it to html_js_files), so an English-only build (jupyter-book build book) neither links nor sends anyone to a
 * Chinese page that is not there.
 */
(function () {
  "use strict";
  var KEY = "pipeline-kit.edition", CARDS = "pipeline-kit.language";
  var edition = /^zh/i.test(document.documentElement.lang || "") ? "zh" : "en";

  function stored() {
    try { return window.localStorage.getItem(KEY); } catch (err) { return null; }
  }

  function twin() {
    var tag = document.querySelector("[data-content_root]");
    if (!tag) return null;
    var root = new URL(tag.getAttribute("data-content_root"), window.location.href).href;
    var here = window.location.href;
    if (here.indexOf(root) !== 0) return null;
    var rel = here.slice(root.length);
    return edition === "en" ? root + "zh/" + rel : new URL("../", root).href + rel;
  }

  var target = twin();
  var choice = stored();
  if (target && (choice === "zh" || choice === "en") && choice !== edition) {
    window.location.replace(target);  // the reader chose the other language on an earlier page
    return;
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!target) return;
    var link = document.createElement("a");
    link.id = "pk-edition-switch";
    link.href = target;
    link.className = "btn pk-edition-switch";
    link.lang = edition === "en" ? "zh-Hans" : "en";
    link.textContent = edition === "en" ? "中文" : "English";
    link.title = edition === "en" ? "本页的中文版" : "This page in English";
    link.addEventListener("click", function () {
      var chosen = edition === "en" ? "zh" : "en";
      try {
        window.localStorage.setItem(KEY, chosen);
        window.localStorage.setItem(CARDS, chosen);
      } catch (err) { /* not kept */ }
    });
    var bar = document.querySelector(".article-header-buttons") || document.querySelector(".header-article-items__end");
    if (bar) bar.insertBefore(link, bar.firstChild);
    else document.body.insertBefore(link, document.body.firstChild);
  });
})();
