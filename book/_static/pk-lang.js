/* The book's one language for the interview cards (book/cards), remembered from page to page.
 *
 * Why: every card used to open in English, and a reader who rehearses in Chinese clicked 中文 on each of the
 * fifteen cards of the cards page, and again on every chapter.  Now a click on any card's English / 中文 button
 * sets the language of every card, here and on every page opened later.  The choice lives in localStorage,
 * which Chromium keeps for file:// pages too, so a downloaded copy of the book opened with no server remembers
 * it.  Before any choice, the Chinese edition's cards and a reader whose browser asks for Chinese first get
 * Chinese; everyone else English.
 *
 * This file loads in <head> (Jupyter Book includes _static/*.js there, without defer): the language is set on
 * <html> (data-pk-lang, which pk-book.css reads) before the body is drawn, so a card never flashes English
 * first.  Without script, each card's radio buttons still switch it on their own.
 */
(function () {
  "use strict";
  var KEY = "pipeline-kit.language";
  var LANGS = ["en", "zh"];

  function stored() {
    try {
      var lang = window.localStorage.getItem(KEY);
      return LANGS.indexOf(lang) >= 0 ? lang : null;
    } catch (err) {  // storage switched off: the language lasts as long as the page
      return null;
    }
  }

  function preferred() {
    var asked = (navigator.languages && navigator.languages[0]) || navigator.language || "";
    var edition = document.documentElement.lang || "";  // the Chinese edition's pages are zh-CN
    return stored() || (/^zh/i.test(edition) || /^zh\b/i.test(asked) ? "zh" : "en");
  }

  /* Show every card in `lang` and check its matching button (for the keyboard and screen readers). */
  function apply(lang) {
    document.documentElement.setAttribute("data-pk-lang", lang);
    var buttons = document.querySelectorAll(".pk-card > input.pk-card-" + lang);
    for (var i = 0; i < buttons.length; i++) buttons[i].checked = true;
  }

  apply(preferred());
  document.addEventListener("DOMContentLoaded", function () { apply(preferred()); });
  // Back and forward restore a page from the cache: the language may have changed on another page meanwhile.
  window.addEventListener("pageshow", function () { apply(preferred()); });
  // Another tab or window of the book chose a language.
  window.addEventListener("storage", function (event) {
    if (event.key === KEY && LANGS.indexOf(event.newValue) >= 0) apply(event.newValue);
  });

  document.addEventListener("change", function (event) {
    var button = event.target;
    if (!button.matches || !button.matches(".pk-card > input[type=radio]")) return;
    var lang = button.classList.contains("pk-card-zh") ? "zh" : "en";
    // The cards above the clicked one change height: keep the clicked card where the reader's eyes are, and
    // again once the fonts the new language needs have loaded (the Chinese webfont, the first time).
    var card = button.parentElement;
    var top = card.getBoundingClientRect().top;
    var keep = function () { window.scrollBy(0, card.getBoundingClientRect().top - top); };
    try {
      window.localStorage.setItem(KEY, lang);
    } catch (err) { /* not remembered, still applied */ }
    apply(lang);
    keep();
    if (document.fonts && document.fonts.status !== "loaded") document.fonts.ready.then(keep);
  });
})();
