// The console works without this script; it only adds a box that ticks
// every row of the dead-letter page at once.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var all = document.getElementById("select-all");
  if (!all) {
    return;
  }
  var boxes = document.querySelectorAll('#selection input[name="event"]');
  all.hidden = false;
  all.addEventListener("change", function () {
    boxes.forEach(function (b) { b.checked = all.checked; });
  });
});
