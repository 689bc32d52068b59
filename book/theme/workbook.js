// The workbook's few additions to mdBook's pages (book.toml: additional-js).
(function () {
    'use strict';

    // Phones show each table row as a card (theme/workbook.css): every cell gets its column's
    // name from the header row.
    function labelTableCells() {
        document.querySelectorAll('.content table').forEach(function (table) {
            var names = Array.from(table.querySelectorAll('thead th')).map(function (th) {
                return th.textContent.trim();
            });
            table.querySelectorAll('tbody tr').forEach(function (row) {
                Array.from(row.children).forEach(function (cell, i) {
                    if (names[i]) {
                        cell.setAttribute('data-label', names[i]);
                    }
                });
            });
        });
    }

    // A solution page opens behind its gate; the button shows the solution.
    function openGates() {
        document.querySelectorAll('.content .wb-gate-open').forEach(function (button) {
            button.addEventListener('click', function () {
                var gated = document.getElementById('wb-solution');
                if (gated !== null) {
                    gated.classList.add('wb-open');
                }
                var gate = button.closest('.wb-gate');
                if (gate !== null) {
                    gate.style.display = 'none';
                }
            });
        });
    }

    function ready() {
        labelTableCells();
        openGates();
    }

    if (document.readyState === 'loading') {
        document.addEventListener('DOMContentLoaded', ready);
    } else {
        ready();
    }
})();
