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
                // The solution is the gate's next .wb-gated sibling (print.html holds them all).
                var gate = button.closest('.wb-gate');
                if (gate === null) {
                    return;
                }
                var gated = gate.nextElementSibling;
                while (gated !== null && !gated.classList.contains('wb-gated')) {
                    gated = gated.nextElementSibling;
                }
                if (gated !== null) {
                    gated.classList.add('wb-open');
                }
                gate.style.display = 'none';
            });
        });
    }

    // Self-check questions (written by `workbook book` from book/quizzes/): the first choice
    // clicked is the answer; then every choice shows whether it was right, and the explanation
    // opens.
    function answerQuestions() {
        document.querySelectorAll('.content .wb-question').forEach(function (question) {
            var choices = Array.from(question.querySelectorAll('.wb-choice'));
            choices.forEach(function (choice) {
                choice.addEventListener('click', function () {
                    if (question.classList.contains('wb-answered')) {
                        return;
                    }
                    question.classList.add('wb-answered');
                    var right = choice.getAttribute('data-right') === 'true';
                    choice.classList.add('wb-chosen');
                    choices.forEach(function (c) {
                        c.disabled = true;
                        if (c.getAttribute('data-right') === 'true') {
                            c.classList.add('wb-right');
                        } else if (c === choice) {
                            c.classList.add('wb-wrong');
                        }
                    });
                    var verdict = question.querySelector('.wb-verdict');
                    if (verdict !== null) {
                        verdict.textContent = right ? 'Right.' : 'Not quite.';
                        verdict.hidden = false;
                    }
                    var explanation = question.querySelector('.wb-explanation');
                    if (explanation !== null) {
                        explanation.hidden = false;
                    }
                });
            });
        });
    }

    function ready() {
        labelTableCells();
        openGates();
        answerQuestions();
    }

    if (document.readyState === 'loading') {
        document.addEventListener('DOMContentLoaded', ready);
    } else {
        ready();
    }
})();
