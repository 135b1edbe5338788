// The theme's search (Material for MkDocs, lunr) reads a query as lunr syntax and, for Chinese,
// splits it by the words of the index. Three things it does wrong for what people paste here (a
// log line) or type (a Chinese word) are put right in the query before it reaches the search
// worker; the index and the ranking stay the theme's own.
(function () {
  var QUERY = 2; // the theme's SearchMessageType.QUERY: the text in the search box

  function query(text) {
    // ":" and "-" are lunr operators (field:word, -word): "KeyError: 'prompt'" would search only
    // 'prompt'. In a log line they are punctuation, and the index splits words at them anyway.
    text = text.replace(/[:\-]/g, " ");
    // The theme cuts a run of Chinese characters into words of the index but never tries the run
    // up to its last character (共享内存 is searched as 共享 + 内): a character after it, never part
    // of a word tried, lets it find the whole word.
    text = text.replace(/\p{sc=Han}{2,}/gu, "$&\u3007");
    // The theme makes every word a prefix (word*), a finished one too, so a stop word matches other
    // words ("in" finds "internal"). A word followed by a space is finished: "^1" (lunr's boost, 1
    // changes nothing) keeps it whole, so it matches itself and stop words are dropped as lunr means.
    var parts = text.split(/(\s+)/);
    var typing = /\s$/.test(text) ? -1 : parts.length - 1;
    return parts.map(function (part, i) {
      var whole = i !== typing && /[A-Za-z0-9]/.test(part) && !/[\^~*+]|\p{sc=Han}/u.test(part);
      return whole ? part + "^1" : part;
    }).join("");
  }

  var post = Worker.prototype.postMessage;
  Worker.prototype.postMessage = function (message) {
    if (message && message.type === QUERY && typeof message.data === "string") {
      arguments[0] = { type: QUERY, data: query(message.data) };
    }
    return post.apply(this, arguments);
  };
})();
