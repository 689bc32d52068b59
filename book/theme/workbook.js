// The workbook's few additions to mdBook's pages (book.toml: additional-js).
(function () {
    'use strict';

    // The book in other languages (crates/workbook/src/book/i18n.rs): a translated page sets
    // window.wbLines, this script's lines in its language. t(line, x, y) gives a line in the
    // page's language with {0}, {1} replaced by x, y; `workbook i18n update` finds every call of
    // t with a quoted line here and puts the line in the catalogues.
    function t(text) {
        var args = arguments;
        var lines = window.wbLines || {};
        var line = Object.prototype.hasOwnProperty.call(lines, text) ? lines[text] : text;
        return line.replace(/\{(\d)\}/g, function (whole, i) {
            return String(args[Number(i) + 1]);
        });
    }

    // The languages the book is built in: English at the root, each translation in its folder.
    var LANGUAGES = [['en', 'English'], ['ko', '한국어'], ['zh-CN', '简体中文']];

    // The page's language, and the English book's root from this page.
    function pageLanguage() {
        var lang = document.documentElement.getAttribute('lang') || 'en';
        return LANGUAGES.some(function (l) { return l[0] === lang; }) ? lang : 'en';
    }
    function englishRoot() {
        var root = typeof path_to_root === 'string' ? path_to_root : '';
        return pageLanguage() === 'en' ? root : root + '../';
    }

    // mdBook's search trims from the words searched for every letter beyond ASCII (elasticlunr's
    // trimmer is \W); a translated book indexes such words (crates/workbook/src/book/i18n.rs),
    // so its search keeps them. It runs before the index is loaded, at the first search.
    if (pageLanguage() !== 'en' && typeof elasticlunr !== 'undefined' && elasticlunr.Pipeline) {
        var trimmer = function (token) {
            return token.replace(/^[^\p{L}\p{N}_]+/u, '').replace(/[^\p{L}\p{N}_]+$/u, '');
        };
        trimmer.label = 'trimmer';
        elasticlunr.Pipeline.registeredFunctions.trimmer = trimmer;
    }

    // A picker in the menu bar that opens this same page in another language.
    function addLanguagePicker() {
        var buttons = document.querySelector('#mdbook-menu-bar .right-buttons, .right-buttons');
        if (buttons === null) {
            return;
        }
        var root = typeof path_to_root === 'string' ? path_to_root : '';
        // This page's path inside its language's book: what follows its root in the address.
        var base = new URL(root || './', window.location.href).href;
        var page = window.location.href.indexOf(base) === 0
            ? window.location.href.slice(base.length) : '';
        var english = new URL(englishRoot() || './', window.location.href).href;
        var current = pageLanguage();
        var select = element('select', 'wb-language');
        select.setAttribute('aria-label', t('Language'));
        LANGUAGES.forEach(function (l) {
            var option = element('option', '', l[1]);
            option.value = english + (l[0] === 'en' ? '' : l[0] + '/') + page;
            option.lang = l[0];
            option.selected = l[0] === current;
            select.appendChild(option);
        });
        select.addEventListener('change', function () {
            window.location.href = select.value;
        });
        buttons.insertBefore(select, buttons.firstChild);
    }

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

    // A solution page opens behind its gate; the button shows the solution. Once shown, a
    // chapter's solution stays shown on later visits and reloads (browser storage; where the
    // browser keeps none, as some do for file:// pages, the gate simply comes back).
    var UNLOCKED = 'workbook.solution-shown.';
    function remembered(chapter) {
        try {
            return window.localStorage.getItem(UNLOCKED + chapter) === 'yes';
        } catch (e) {
            return false;
        }
    }
    function remember(chapter) {
        try {
            window.localStorage.setItem(UNLOCKED + chapter, 'yes');
        } catch (e) {
            // No storage: the gate comes back next time, which is all that is lost.
        }
    }
    function openGate(gate) {
        // The solution is the gate's next .wb-gated sibling (print.html holds them all).
        var gated = gate.nextElementSibling;
        while (gated !== null && !gated.classList.contains('wb-gated')) {
            gated = gated.nextElementSibling;
        }
        if (gated !== null) {
            gated.classList.add('wb-open');
        }
        gate.style.display = 'none';
    }
    function openGates() {
        document.querySelectorAll('.content .wb-gate').forEach(function (gate) {
            var chapter = gate.getAttribute('data-chapter') || '';
            if (chapter !== '' && remembered(chapter)) {
                openGate(gate);
                return;
            }
            var button = gate.querySelector('.wb-gate-open');
            if (button === null) {
                return;
            }
            button.addEventListener('click', function () {
                if (chapter !== '') {
                    remember(chapter);
                }
                openGate(gate);
            });
        });
    }

    // Self-check questions (written by `workbook book` from book/quizzes/). A question with one
    // right answer has buttons: the first one clicked is the answer. One with several ("pick all
    // that apply") has checkboxes and a check button: the boxes ticked are the answer, right only
    // when they are exactly the right ones (as mdbook-quiz grades them). Once answered, every
    // right choice is marked, a wrong pick too, the verdict is read out (aria-live) and the
    // explanation opens. Without scripting the explanation is a closed <details> under the
    // choices; here it stays hidden until the question is answered.
    // Answers are kept in browser storage, one entry per question (its id names the chapter):
    // which choices were picked, whether that was right, and what the review page shows.
    var ANSWER = 'workbook.answer.';
    function store() {
        try {
            return window.localStorage;
        } catch (e) {
            return null;
        }
    }
    function keptAnswer(id) {
        var storage = store();
        if (storage === null || !id) {
            return null;
        }
        try {
            return JSON.parse(storage.getItem(ANSWER + id) || 'null');
        } catch (e) {
            return null;
        }
    }
    function keepAnswer(question, choices, picked, right, explanation) {
        var storage = store();
        var match = /^wb-question-(.+)-(\d+)$/.exec(question.id || '');
        if (storage === null || match === null) {
            return;
        }
        var prompt = question.querySelector('.wb-prompt');
        var body = explanation === null ? '' : Array.from(explanation.childNodes)
            .filter(function (n) {
                return n.nodeName !== 'SUMMARY';
            })
            .map(function (n) {
                return n.nodeType === 1 ? n.outerHTML : n.textContent;
            }).join('');
        try {
            storage.setItem(ANSWER + question.id, JSON.stringify({
                chapter: match[1],
                number: Number(match[2]),
                page: window.location.pathname.split('/').pop(),
                picked: picked.map(function (c) {
                    return choices.indexOf(c);
                }),
                right: right,
                prompt: prompt === null ? '' : prompt.textContent.trim(),
                answers: choices.filter(function (c) {
                    return c.getAttribute('data-right') === 'true';
                }).map(function (c) {
                    return c.textContent.trim();
                }),
                explanation: body
            }));
        } catch (e) {
            // Storage full or refused: the answer is simply not kept.
        }
    }

    // The review page (review.md's #wb-review): every question answered wrongly, chapter by
    // chapter, with the right answer and the explanation, and a button per chapter that forgets
    // that chapter's answers.
    function showReview() {
        var review = document.getElementById('wb-review');
        var storage = store();
        if (review === null || storage === null) {
            return;
        }
        var byChapter = {};
        for (var i = 0; i < storage.length; i++) {
            var key = storage.key(i);
            if (key === null || key.indexOf(ANSWER) !== 0) {
                continue;
            }
            var kept = keptAnswer(key.slice(ANSWER.length));
            if (kept === null || typeof kept.chapter !== 'string') {
                continue;
            }
            (byChapter[kept.chapter] = byChapter[kept.chapter] || []).push([key, kept]);
        }
        review.textContent = '';
        var chapters = Object.keys(byChapter).sort();
        if (chapters.length === 0) {
            review.appendChild(element('p', 'wb-review-empty',
                t('No question answered yet: answers given in the chapters show up here.')));
            return;
        }
        chapters.forEach(function (chapter) {
            var entries = byChapter[chapter].sort(function (a, b) {
                return a[1].number - b[1].number;
            });
            var wrong = entries.filter(function (e) {
                return !e[1].right;
            });
            var section = element('section', 'wb-review-chapter');
            section.setAttribute('data-chapter', chapter);
            var heading = element('h2', '', chapter);
            section.appendChild(heading);
            section.appendChild(element('p', 'wb-review-count', wrong.length > 0
                ? t('{0} answered, {1} wrongly:', entries.length, wrong.length)
                : t('{0} answered, {1} wrongly.', entries.length, wrong.length)));
            wrong.forEach(function (e) {
                var kept = e[1];
                var item = element('div', 'wb-review-question');
                var link = element('a', '', kept.prompt || t('Question {0}.', kept.number));
                link.href = (kept.page || (chapter + '.html')) + '#wb-question-' + chapter + '-' +
                    kept.number;
                var p = element('p', 'wb-review-prompt');
                p.appendChild(link);
                item.appendChild(p);
                item.appendChild(element('p', 'wb-review-answer', t('Right: {0}',
                    (kept.answers || []).join('; '))));
                var why = element('div', 'wb-review-explanation');
                why.innerHTML = kept.explanation || '';
                item.appendChild(why);
                section.appendChild(item);
            });
            var reset = element('button', 'wb-review-reset', t('Forget my answers in {0}', chapter));
            reset.type = 'button';
            reset.addEventListener('click', function () {
                entries.forEach(function (e) {
                    storage.removeItem(e[0]);
                });
                showReview();
            });
            section.appendChild(reset);
            review.appendChild(section);
        });
    }

    // When `workbook start` (or `book --serve`) serves the book, it answers
    // workbook-progress.json from .workbook/: each exercise's box shows where the learner stands,
    // and the sidebar ticks finished chapters. Served any other way, or from files, nothing
    // changes.
    function showProgress() {
        if (!/^https?:$/.test(window.location.protocol) || typeof fetch !== 'function') {
            return;
        }
        // The server answers it at the English book's root, for every language.
        fetch(englishRoot() + 'workbook-progress.json', { cache: 'no-store' }).then(function (r) {
            var json = r.headers.get('Content-Type') || '';
            return r.ok && json.indexOf('application/json') === 0 ? r.json() : null;
        }).then(function (progress) {
            if (progress === null || !Array.isArray(progress.chapters)) {
                return;
            }
            var byName = {};
            progress.chapters.forEach(function (c) {
                byName[c.name] = c;
            });
            document.querySelectorAll('.content .wb-commands[data-chapter]').forEach(function (box) {
                var chapter = byName[box.getAttribute('data-chapter')];
                var exercise = chapter && chapter.exercises.filter(function (e) {
                    return e.name === box.getAttribute('data-exercise');
                })[0];
                if (!exercise) {
                    return;
                }
                var text = exercise.state === 'done'
                    ? t('✓ Done: all {0} tests pass.', exercise.total)
                    : exercise.state === 'failing'
                        ? t('✗ Failing: {0} of {1} tests pass.', exercise.passed, exercise.total)
                        : t('· Not started yet.');
                var mark = element('p', 'wb-progress wb-progress-' + exercise.state, text);
                box.insertBefore(mark, box.firstChild);
            });
            // A reveal holding an exercise's answer (`<details class="wb-answer">`) opens by
            // itself once that exercise's tests pass; the learner has made the prediction.
            document.querySelectorAll('.content details.wb-answer[data-chapter]').forEach(function (reveal) {
                var chapter = byName[reveal.getAttribute('data-chapter')];
                var exercise = chapter && chapter.exercises.filter(function (e) {
                    return e.name === reveal.getAttribute('data-exercise');
                })[0];
                if (exercise && exercise.state === 'done' && !reveal.open) {
                    reveal.open = true;
                    reveal.classList.add('wb-answer-earned');
                }
            });
            var tick = function () {
                document.querySelectorAll('#mdbook-sidebar a[href]').forEach(function (a) {
                    var page = (a.getAttribute('href') || '').split('/').pop().replace(/\.html.*$/, '');
                    var chapter = byName[page];
                    if (chapter && chapter.done && !a.classList.contains('wb-done')) {
                        a.classList.add('wb-done');
                        a.appendChild(element('span', 'wb-done-mark', ' ✓'));
                        a.setAttribute('title', t('done: every test passes'));
                    }
                });
            };
            tick();
            // mdBook may fill the sidebar after this script has run.
            window.setTimeout(tick, 0);
        }).catch(function () {
            // No progress to show: the book as always.
        });
    }

    function answerQuestions() {
        document.querySelectorAll('.content .wb-question').forEach(function (question) {
            var choices = Array.from(question.querySelectorAll('.wb-choice'));
            var verdict = question.querySelector('.wb-verdict');
            var explanation = question.querySelector('.wb-explanation');
            var submit = question.querySelector('.wb-submit');
            if (explanation !== null) {
                explanation.hidden = true;
            }
            function isRight(choice) {
                return choice.getAttribute('data-right') === 'true';
            }
            function say(text) {
                if (verdict !== null) {
                    verdict.textContent = text;
                    verdict.hidden = false;
                }
            }
            // Marks the question answered with `picked` (the choices chosen).
            function answer(picked) {
                question.classList.add('wb-answered');
                var right = choices.every(function (c) {
                    return isRight(c) === (picked.indexOf(c) !== -1);
                });
                choices.forEach(function (c) {
                    var box = c.querySelector('input');
                    (box !== null ? box : c).disabled = true;
                    if (picked.indexOf(c) !== -1) {
                        c.classList.add('wb-chosen');
                    }
                    if (isRight(c)) {
                        c.classList.add('wb-right');
                    } else if (picked.indexOf(c) !== -1) {
                        c.classList.add('wb-wrong');
                    }
                });
                say(right ? t('Right.') : t('Not quite.'));
                if (explanation !== null) {
                    explanation.hidden = false;
                    explanation.open = true;
                }
                keepAnswer(question, choices, picked, right, explanation);
            }
            var kept = keptAnswer(question.id);
            if (kept !== null && Array.isArray(kept.picked)) {
                var again = kept.picked.map(function (i) {
                    return choices[i];
                }).filter(function (c) {
                    return c !== undefined;
                });
                if (again.length > 0) {
                    again.forEach(function (c) {
                        var box = c.querySelector('input');
                        if (box !== null) {
                            box.checked = true;
                        }
                    });
                    answer(again);
                    if (submit !== null) {
                        submit.hidden = false;
                        submit.disabled = true;
                    }
                    return;
                }
            }
            if (submit === null) {
                choices.forEach(function (choice) {
                    choice.addEventListener('click', function () {
                        if (!question.classList.contains('wb-answered')) {
                            answer([choice]);
                        }
                    });
                });
                return;
            }
            submit.hidden = false;
            submit.addEventListener('click', function () {
                if (question.classList.contains('wb-answered')) {
                    return;
                }
                var picked = choices.filter(function (c) {
                    return c.querySelector('input').checked;
                });
                if (picked.length === 0) {
                    say(t('Tick at least one box first.'));
                    return;
                }
                answer(picked);
                submit.disabled = true;
            });
        });
    }


    // The interactive view of a chapter's pictures: beside the static timeline and segment map
    // (book/src/pictures/, which stay for print and for readers without JavaScript), a view
    // that steps through the allocator's events from `<chapter>-history.json` (written by
    // `workbook pictures`). Colours come from CSS variables (theme/workbook.css), so every theme
    // reads.
    var SVG = 'http://www.w3.org/2000/svg';
    var UNITS = [[1099511627776, 'TiB'], [1073741824, 'GiB'], [1048576, 'MiB'], [1024, 'KiB']];

    // Bytes as the static pictures write them: "20 MiB", "1.14 MiB", "2 MiB − 512 B".
    function size(bytes) {
        var unit = 1;
        var name = 'B';
        for (var i = 0; i < UNITS.length; i++) {
            if (bytes >= UNITS[i][0]) {
                unit = UNITS[i][0];
                name = UNITS[i][1];
                break;
            }
        }
        var ratio = function (value) {
            return value % unit === 0 ? String(value / unit)
                : (value / unit).toFixed(2).replace(/0+$/, '').replace(/\.$/, '');
        };
        var whole = Math.round(bytes / unit) * unit;
        if (unit > 1 && whole !== bytes && ratio(bytes) === String(whole / unit)) {
            return whole > bytes ? (whole / unit) + ' ' + name + ' − ' + size(whole - bytes)
                : (whole / unit) + ' ' + name + ' + ' + size(bytes - whole);
        }
        return ratio(bytes) + ' ' + name;
    }

    function element(tag, className, text) {
        var e = document.createElement(tag);
        if (className) {
            e.className = className;
        }
        if (text !== undefined) {
            e.textContent = text;
        }
        return e;
    }

    function svgElement(tag, attributes) {
        var e = document.createElementNS(SVG, tag);
        Object.keys(attributes).forEach(function (name) {
            e.setAttribute(name, attributes[name]);
        });
        return e;
    }

    // One trace row as an object (the file's `columns`).
    function eventOf(history, row) {
        var e = {};
        history.columns.forEach(function (name, i) {
            e[name] = row[i];
        });
        return e;
    }

    // The event in words: "alloc 4 MiB on stream 0 → allocated 12 MiB, reserved 20 MiB".
    function describe(e) {
        var what;
        // Segments are numbered from 1 here, as the static segment map numbers them.
        var segment = e.segment === null ? null : e.segment + 1;
        if (e.action === 'alloc' || e.action === 'free_requested'
            || e.action === 'free_completed') {
            what = segment === null
                ? t('{0} {1} ({2} requested) on stream {3}', e.action, size(e.size),
                    size(e.requested), e.stream)
                : t('{0} {1} ({2} requested) on stream {3} in segment {4}', e.action,
                    size(e.size), size(e.requested), e.stream, segment);
        } else if (e.action === 'snapshot') {
            what = t('snapshot taken, {0} active', size(e.size));
        } else if (e.action === 'oom') {
            what = t('out of memory: a segment of {0} could not be reserved on stream {1}',
                     size(e.size), e.stream);
        } else {
            what = segment === null
                ? t('{0} {1} on stream {2}', e.action, size(e.size), e.stream)
                : t('{0} {1} in segment {2} on stream {3}', e.action, size(e.size), segment,
                    e.stream);
        }
        return t('{0} → allocated {1}, reserved {2}', what, size(e.allocated), size(e.reserved));
    }

    // The walkthrough's steps (`steps`: [index, label], the step beginning at event `index`):
    // the one event `i` belongs to, as its position in the list, or -1 before the first.
    function stepsOf(history) {
        return (history.steps || []).filter(function (s) {
            return s[0] < history.trace.length;
        });
    }

    // A step's short name on the axis: the number its label begins with ("2. drop(host)"), or
    // its place in the list.
    function stepNumber(steps, k) {
        var m = /^(\d+)\./.exec(steps[k][1]);
        return m === null ? String(k + 1) : m[1];
    }

    function stepAt(steps, i) {
        var found = -1;
        steps.forEach(function (s, k) {
            if (s[0] <= i) {
                found = k;
            }
        });
        return found;
    }

    // The segments after event `last`: each reserved one with its live blocks, by offset.
    function segmentsAt(history, last) {
        // Segments reserved before recording began, with the blocks known to be live then.
        var segments = history.initial.map(function (segment, i) {
            return { number: i, size: segment.size, blocks: segment.blocks.map(function (b) {
                return { offset: b[0], size: b[1], requested: b[2], stream: b[3], at: -1 };
            }) };
        });
        var byNumber = {};
        segments.forEach(function (s) {
            byNumber[s.number] = s;
        });
        for (var i = 0; i <= last; i++) {
            var e = eventOf(history, history.trace[i]);
            var s = e.segment === null ? undefined : byNumber[e.segment];
            if (e.action === 'segment_alloc' || e.action === 'segment_map') {
                if (s === undefined) {
                    byNumber[e.segment] = { number: e.segment, size: e.size, blocks: [] };
                } else {
                    s.size += e.size; // an expandable segment growing
                }
            } else if (s === undefined) {
                continue;
            } else if (e.action === 'segment_free' || e.action === 'segment_unmap') {
                if (e.offset === 0 && e.size >= s.size) {
                    delete byNumber[e.segment];
                } else {
                    s.size -= e.size;
                }
            } else if (e.action === 'alloc') {
                s.blocks.push({ offset: e.offset, size: e.size, requested: e.requested,
                                stream: e.stream, at: i });
            } else if (e.action === 'free_requested') {
                // Freed by the program; back in the cache at its free_completed.
                s.blocks.forEach(function (b) {
                    if (b.offset === e.offset) {
                        b.pending = true;
                    }
                });
            } else if (e.action === 'free_completed') {
                s.blocks = s.blocks.filter(function (b) {
                    return b.offset !== e.offset || !b.pending;
                });
            }
        }
        return Object.keys(byNumber).map(function (k) {
            return byNumber[k];
        }).sort(function (a, b) {
            return a.number - b.number;
        }).map(function (s) {
            s.blocks.sort(function (a, b) {
                return a.offset - b.offset;
            });
            return s;
        });
    }

    // The timeline: allocated and reserved bytes after each event, drawn at the width it has
    // (so that its labels stay 12 px on a phone), with a cursor at the current event. Event i
    // (counted from 0 here, from 1 in the words) spans x(i - 1) to x(i); its change, the cursor,
    // its out-of-memory line and a step's tick are all drawn where the span begins, as in the
    // static picture.
    function drawTimeline(view, history, current) {
        var box = view.timeline;
        var width = Math.max(box.clientWidth, 200);
        var steps = stepsOf(history);
        var left = 8;
        var right = width - 8;
        // Room above the plot for the steps' marks: numbered circles, not axis values.
        var top = steps.length > 0 ? 38 : 20;
        var height = 150 + top - 20;
        var bottom = height - 22;
        var rows = history.trace;
        var peak = history.before[1];
        rows.forEach(function (r) {
            var e = eventOf(history, r);
            peak = Math.max(peak, e.reserved, e.allocated);
        });
        peak = Math.max(peak, 1);
        var x = function (i) {
            return left + (right - left) * (i + 1) / rows.length;
        };
        var y = function (bytes) {
            return bottom - (bottom - top) * bytes / peak;
        };
        var path = function (column) {
            var d = 'M' + left + ' ' + bottom + ' L' + left + ' ' + y(history.before[column]);
            var value = history.before[column];
            rows.forEach(function (r, i) {
                var e = eventOf(history, r);
                var next = column === 0 ? e.allocated : e.reserved;
                d += ' L' + x(i - 1).toFixed(1) + ' ' + y(value).toFixed(1)
                    + ' L' + x(i - 1).toFixed(1) + ' ' + y(next).toFixed(1);
                value = next;
            });
            return d + ' L' + right + ' ' + y(value).toFixed(1) + ' L' + right + ' ' + bottom + ' Z';
        };
        var svg = svgElement('svg', { width: width, height: height, role: 'img',
            'aria-label': t('Allocated and reserved bytes after each event; the line marks event {0} of {1}', current + 1, rows.length) });
        svg.appendChild(svgElement('path', { d: path(1), class: 'wb-mv-reserved' }));
        svg.appendChild(svgElement('path', { d: path(0), class: 'wb-mv-allocated' }));
        svg.appendChild(svgElement('line', { x1: left, x2: right, y1: bottom, y2: bottom,
                                             class: 'wb-mv-axis' }));
        rows.forEach(function (r, i) {
            if (r[0] === 'oom') {
                svg.appendChild(svgElement('line', { x1: x(i - 1) + 0.5, x2: x(i - 1) + 0.5,
                    y1: top, y2: bottom, class: 'wb-mv-oom' }));
            }
        });
        var label = function (text, at, anchor, baseline) {
            var t = svgElement('text', { x: at[0], y: at[1], 'text-anchor': anchor,
                                         class: 'wb-mv-label' });
            t.textContent = text;
            if (baseline) {
                t.setAttribute('dominant-baseline', baseline);
            }
            svg.appendChild(t);
        };
        // The walkthrough's steps: a tick where each begins, marked above the plot by its
        // number in a circle (the words are in the list of steps and the event's
        // description); a mark that would touch the one before is left out, the tick stays.
        var marked = -Infinity;
        steps.forEach(function (s, k) {
            var sx = x(s[0] - 1) + 0.5;
            var current_ = k === stepAt(steps, current) ? ' wb-mv-current' : '';
            svg.appendChild(svgElement('line', { x1: sx, x2: sx, y1: top - 4, y2: bottom,
                class: 'wb-mv-step-tick' + current_ }));
            // Steps that begin at the same event: the last one is the event's, and marked.
            var sameAsNext = k + 1 < steps.length && steps[k + 1][0] === s[0];
            var cx = Math.min(Math.max(sx, left + 9), right - 9);
            if (!sameAsNext && cx - marked >= 20) {
                svg.appendChild(svgElement('circle', { cx: cx, cy: top - 13, r: 9,
                    class: 'wb-mv-step-mark' + current_ }));
                var t = svgElement('text', { x: cx, y: top - 13, 'text-anchor': 'middle',
                    'dominant-baseline': 'central', class: 'wb-mv-step-number' + current_ });
                t.textContent = stepNumber(steps, k);
                svg.appendChild(t);
                marked = cx;
            }
        });
        label(t('peak {0}', size(peak)), [left, 13], 'start');
        label(t('event {0}', 1), [left, height - 4], 'start');
        label(t('event {0}', rows.length), [right, height - 4], 'end');
        var cx = x(current - 1) + 0.5;
        svg.appendChild(svgElement('line', { x1: cx, x2: cx, y1: top - 4, y2: bottom + 4,
                                             class: 'wb-mv-cursor' }));
        svg.addEventListener('click', function (event) {
            var bounds = svg.getBoundingClientRect();
            var at = (event.clientX - bounds.left - left) / (right - left) * rows.length;
            view.go(Math.floor(at));
        });
        box.replaceChildren(svg);
    }

    // The segment map at the current event: one bar per segment, its live blocks placed by their
    // offset; hovering, tapping or focusing a block says what it is.
    function drawSegments(view, history, current) {
        var segments = segmentsAt(history, current);
        var map = view.segments;
        map.replaceChildren();
        if (segments.length === 0) {
            map.appendChild(element('p', 'wb-mv-none', t('No segment is reserved after this event.')));
        }
        var largest = Math.max.apply(null, segments.map(function (s) {
            return s.size;
        }).concat([1]));
        segments.forEach(function (s) {
            var live = s.blocks.reduce(function (sum, b) {
                return b.pending ? sum : sum + b.size;
            }, 0);
            var row = element('div', 'wb-mv-segment');
            row.appendChild(element('div', 'wb-mv-segment-name',
                t('segment {0} · {1} · live {2}', s.number + 1, size(s.size), size(live))));
            var bar = element('div', 'wb-mv-bar');
            bar.style.width = (100 * s.size / largest).toFixed(2) + '%';
            row.appendChild(bar);
            map.appendChild(row);
            // Blocks sit at their offset, but each is at least 5 px wide and starts after the
            // one before, so that a block of 512 B in 2 MiB can still be seen and pointed at.
            var least = bar.clientWidth > 0 ? 100 * 5 / bar.clientWidth : 0;
            var end = 0;
            s.blocks.forEach(function (b) {
                var block = element('div', 'wb-mv-block' + (b.at === current ? ' wb-mv-new' : '')
                    + (b.pending ? ' wb-mv-pending' : ''));
                var left = Math.max(100 * b.offset / s.size, end);
                var width = Math.max(100 * b.size / s.size, least);
                end = left + width;
                block.style.left = left.toFixed(3) + '%';
                block.style.width = width.toFixed(3) + '%';
                block.tabIndex = 0;
                block.setAttribute('role', 'button');
                var words = (b.offset === 0
                    ? t('block of {0} ({1} requested) on stream {2}, at the start of segment {3}',
                        size(b.size), size(b.requested), b.stream, s.number + 1)
                    : t('block of {0} ({1} requested) on stream {2}, at offset {3} of segment {4}',
                        size(b.size), size(b.requested), b.stream, size(b.offset), s.number + 1))
                    + (b.at < 0 ? t(', allocated before recording began')
                        : t(', allocated at event {0}', b.at + 1))
                    + (b.pending ? t('; freed, not yet back in the cache') : '');
                block.setAttribute('aria-label', words);
                var show = function () {
                    view.block.textContent = words.charAt(0).toUpperCase() + words.slice(1);
                    map.querySelectorAll('.wb-mv-shown').forEach(function (other) {
                        other.classList.remove('wb-mv-shown');
                    });
                    block.classList.add('wb-mv-shown');
                };
                block.addEventListener('mouseenter', show);
                block.addEventListener('focus', show);
                block.addEventListener('click', show);
                bar.appendChild(block);
            });
        });
    }

    function buildView(history, after) {
        var last = history.trace.length - 1;
        var view = element('section', 'wb-memview');
        view.setAttribute('aria-label', t('The allocator’s events, step by step'));
        view.appendChild(element('p', 'wb-mv-title', t('Step through the allocator’s {0} events ({1})', history.trace.length, history.device)));
        var controls = addSteps(view, last, 'event');
        var previous = controls.previous, next = controls.next;
        var slider = controls.slider, count = controls.count;
        view.event = element('p', 'wb-mv-event');
        view.event.setAttribute('aria-live', 'polite');
        view.appendChild(view.event);
        view.timeline = element('div', 'wb-mv-timeline');
        view.appendChild(view.timeline);
        // The walkthrough's steps (their labels begin with the number the axis shows); one goes
        // to its first event.
        var steps = stepsOf(history);
        var stepItems = steps.map(function (s) {
            var item = element('li', 'wb-mv-step');
            var link = element('button', 'wb-mv-step-go', s[1]);
            link.addEventListener('click', function () {
                view.go(s[0]);
            });
            item.appendChild(link);
            return item;
        });
        if (steps.length > 0) {
            var list = element('ul', 'wb-mv-steps');
            list.setAttribute('aria-label', t('The walkthrough’s steps'));
            stepItems.forEach(function (item) {
                list.appendChild(item);
            });
            view.appendChild(list);
        }
        var legend = element('p', 'wb-mv-legend');
        [['wb-mv-key-allocated', 'allocated'], ['wb-mv-key-reserved', 'reserved'],
         ['wb-mv-key-live', t('live block')], ['wb-mv-key-new', t('allocated by this event')],
         ['wb-mv-key-pending', t('freed, not yet back in the cache')],
         ['wb-mv-key-free', t('free in a segment')]]
            .concat(history.trace.some(function (r) {
                return r[0] === 'oom';
            }) ? [['wb-mv-key-oom', t('out of memory')]] : [])
            .forEach(function (k) {
                var item = element('span', 'wb-mv-key');
                item.append(element('span', 'wb-mv-swatch ' + k[0]), document.createTextNode(k[1]));
                legend.appendChild(item);
            });
        view.appendChild(legend);
        view.segments = element('div', 'wb-mv-segments');
        view.appendChild(view.segments);
        var hint = t('Hover over or tap a block for its size, requested size and stream.');
        view.block = element('p', 'wb-mv-block-info', hint);
        view.block.setAttribute('aria-live', 'polite');
        view.appendChild(view.block);

        var current = 0;
        view.go = function (i) {
            current = Math.max(0, Math.min(last, i));
            view.current = current;
            slider.value = String(current);
            count.textContent = t('event {0} of {1}', current + 1, last + 1);
            previous.disabled = current === 0;
            next.disabled = current === last;
            var step = stepAt(steps, current);
            view.event.textContent = (step < 0 ? '' : t('Step {0}', steps[step][1]) + ' · ')
                + describe(eventOf(history, history.trace[current]));
            view.setAttribute('data-event', String(current));
            view.setAttribute('data-step', String(step + 1));
            stepItems.forEach(function (item, k) {
                item.classList.toggle('wb-mv-current', k === step);
            });
            view.block.textContent = hint; // the block shown may be gone at this event
            drawTimeline(view, history, current);
            drawSegments(view, history, current);
        };
        after.insertAdjacentElement('afterend', view);
        view.go(0);
        // Drawn again at the width it gets: when the window changes, and when a closed
        // <details> holding it opens (chapter 4's answer in pictures).
        var width = view.timeline.clientWidth;
        var redraw = function () {
            if (view.timeline.clientWidth !== width) {
                width = view.timeline.clientWidth;
                drawTimeline(view, history, current);
                drawSegments(view, history, current);
            }
        };
        if (typeof ResizeObserver === 'function') {
            new ResizeObserver(redraw).observe(view.timeline);
        } else {
            window.addEventListener('resize', redraw);
        }
    }

    // The activity of a chapter whose walkthrough used pinned memory (`activity` in its
    // history.json: `work` rows [start, end, kind, name, stream, bytes, block], `host` rows
    // [tick, action, block, size, requested, allocated, reserved]): one lane per stream and one
    // per pinned block the copies used, stepped through call by call; hovering, tapping or
    // focusing a span says what it was. Placed on the axis as the static picture places them:
    // by the recorded order, never by time.
    function describeCall(w) {
        var kinds = { host_to_device: t('copy host→device'), device_to_host: t('copy device→host'),
                      device_to_device: t('copy device→device') };
        var what = kinds[w[2]] || t('kernel {0}', w[3]);
        if (w[6] === null) {
            return t('{0} {1} on stream {2}', what, size(w[5]), w[4]);
        }
        return w[2] === 'device_to_host'
            ? t('{0} {1} on stream {2} into pinned block {3}', what, size(w[5]), w[4], w[6])
            : t('{0} {1} on stream {2} from pinned block {3}', what, size(w[5]), w[4], w[6]);
    }

    // Each call's [start, end] on the axis: its ends in order, one step apart, a call that begins
    // right after another returned sharing that one's end.
    function callPositions(work) {
        var ends = [];
        work.forEach(function (w, i) {
            ends.push([w[0], 1, i], [w[1], 0, i]);
        });
        ends.sort(function (a, b) {
            return a[0] - b[0];
        });
        var at = work.map(function () {
            return [0, 0];
        });
        var pos = 0;
        var previous = null;
        ends.forEach(function (e) {
            if (previous !== null && !(previous === 0 && e[1] === 1)) {
                pos += 1;
            }
            at[e[2]][e[1] === 1 ? 0 : 1] = pos;
            previous = e[1];
        });
        return { at: at, domain: Math.max(pos, 1) };
    }

    function buildActivityView(activity, after) {
        var work = activity.work;
        var last = work.length - 1;
        var placed = callPositions(work);
        var view = element('section', 'wb-memview wb-actview');
        view.setAttribute('aria-label', t('The copies and kernels, call by call'));
        view.appendChild(element('p', 'wb-mv-title', t('Step through the {0} copies and kernels ({1})', work.length, activity.device)));
        var controls = addSteps(view, last, 'call');
        var previous = controls.previous, next = controls.next;
        var slider = controls.slider, count = controls.count;
        var said = element('p', 'wb-mv-event');
        said.setAttribute('aria-live', 'polite');
        view.appendChild(said);
        var streams = [];
        var blocks = [];
        work.forEach(function (w) {
            if (streams.indexOf(w[4]) < 0) {
                streams.push(w[4]);
            }
            if (w[6] !== null && blocks.indexOf(w[6]) < 0) {
                blocks.push(w[6]);
            }
        });
        streams.sort(function (a, b) {
            return a - b;
        });
        var info = element('p', 'wb-mv-block-info',
                           t('Hover over or tap a span for what it was: stream, bytes, pinned block.'));
        info.setAttribute('aria-live', 'polite');
        var spans = [];
        var lane = function (name, calls, block) {
            var row = element('div', 'wb-av-lane');
            row.appendChild(element('div', 'wb-mv-segment-name', name));
            var bar = element('div', 'wb-mv-bar wb-av-bar');
            row.appendChild(bar);
            if (block !== undefined) {
                // The block in use, from its last alloc or reuse before the first call to the
                // end (or its free).
                var using = calls.map(function (i) {
                    return placed.at[i];
                });
                var life = element('div', 'wb-av-inuse');
                life.style.left = (100 * Math.min.apply(null, using.map(function (p) {
                    return p[0];
                })) / placed.domain).toFixed(3) + '%';
                life.style.right = '0';
                bar.appendChild(life);
            }
            calls.forEach(function (i) {
                var w = work[i];
                var span = element('div', 'wb-av-span wb-av-' + w[2]);
                span.style.left = (100 * placed.at[i][0] / placed.domain).toFixed(3) + '%';
                span.style.width = (100 * (placed.at[i][1] - placed.at[i][0]) / placed.domain)
                    .toFixed(3) + '%';
                span.tabIndex = 0;
                span.setAttribute('role', 'button');
                var words = t('Call {0}: {1}', i + 1, describeCall(w));
                span.setAttribute('aria-label', words);
                var show = function () {
                    info.textContent = words;
                    view.querySelectorAll('.wb-mv-shown').forEach(function (other) {
                        other.classList.remove('wb-mv-shown');
                    });
                    span.classList.add('wb-mv-shown');
                };
                span.addEventListener('mouseenter', show);
                span.addEventListener('focus', show);
                span.addEventListener('click', function () {
                    show();
                    view.go(i);
                });
                span.setAttribute('data-call', String(i));
                spans.push(span);
                bar.appendChild(span);
            });
            view.appendChild(row);
        };
        streams.forEach(function (s) {
            var calls = [];
            work.forEach(function (w, i) {
                if (w[4] === s) {
                    calls.push(i);
                }
            });
            lane(s === 0 ? t('stream {0} · default stream: compute', s)
                : t('stream {0} · a side stream', s), calls);
        });
        blocks.forEach(function (b) {
            var calls = [];
            var bytes = 0;
            work.forEach(function (w, i) {
                if (w[6] === b) {
                    calls.push(i);
                }
            });
            (activity.host || []).forEach(function (e) {
                if (e[2] === b) {
                    bytes = e[3];
                }
            });
            lane(t('pinned block {0} · host memory, {1}', b, size(bytes)), calls, b);
        });
        var legend = element('p', 'wb-mv-legend');
        [['wb-av-host_to_device', t('copy host→device')],
         ['wb-av-device_to_host', t('copy device→host')],
         ['wb-av-kernel', t('kernel')], ['wb-av-inuse', t('pinned block in use')]]
            .forEach(function (k) {
                var item = element('span', 'wb-mv-key');
                item.append(element('span', 'wb-mv-swatch ' + k[0]), document.createTextNode(k[1]));
                legend.appendChild(item);
            });
        view.appendChild(legend);
        view.appendChild(info);
        view.appendChild(element('p', 'wb-av-note', activity.device === 'cpu'
            ? t('On the cpu device each copy and kernel runs when issued: nothing overlaps. On a GPU the side-stream copies would run under the compute.')
            : t('Each span is a call, from its start to its return: on a GPU a queued copy or kernel runs later, and gpumem records no GPU times.')));
        var current = 0;
        view.go = function (i) {
            current = Math.max(0, Math.min(last, i));
            view.current = current;
            slider.value = String(current);
            count.textContent = t('call {0} of {1}', current + 1, work.length);
            previous.disabled = current === 0;
            next.disabled = current === last;
            said.textContent = t('Call {0}: {1}', current + 1, describeCall(work[current]));
            view.setAttribute('data-call', String(current));
            spans.forEach(function (span) {
                span.classList.toggle('wb-av-current',
                                      span.getAttribute('data-call') === String(current));
            });
        };
        after.insertAdjacentElement('afterend', view);
        view.go(0);
    }

    // Adds a view's step controls ("previous", a slider over 0..last, "next" and a count); they,
    // and the arrow keys while the view has focus (instead of turning mdBook's page), ask view.go
    // for the index to show, and view.go keeps the index shown in view.current.
    function addSteps(view, last, label) {
        var controls = element('div', 'wb-mv-controls');
        var previous = element('button', 'wb-mv-previous', '◀ previous');
        var next = element('button', 'wb-mv-next', 'next ▶');
        var slider = element('input', 'wb-mv-slider');
        slider.type = 'range';
        slider.min = '0';
        slider.max = String(last);
        slider.setAttribute('aria-label', label);
        var count = element('span', 'wb-mv-count');
        controls.append(previous, slider, next, count);
        view.appendChild(controls);
        previous.addEventListener('click', function () {
            view.go(view.current - 1);
        });
        next.addEventListener('click', function () {
            view.go(view.current + 1);
        });
        slider.addEventListener('input', function () {
            view.go(Number(slider.value));
        });
        view.addEventListener('keydown', function (e) {
            var step = { ArrowLeft: -1, ArrowRight: 1 }[e.key];
            if (step === undefined || e.altKey || e.ctrlKey || e.metaKey) {
                return;
            }
            e.preventDefault();
            e.stopPropagation();
            view.go(view.current + step);
        });
        return { previous: previous, next: next, slider: slider, count: count };
    }

    function addHistoryViews() {
        document.querySelectorAll('.content img[src^="pictures/"][src$="-timeline.svg"]')
            .forEach(function (img) {
                if (img.closest('.img-wrapper') !== null) {
                    return; // mdBook's zoomed copy of the picture
                }
                var src = img.getAttribute('src');
                var chapter = src.slice('pictures/'.length, -'-timeline.svg'.length);
                // The view goes after the segment map when the page shows it, else the timeline.
                var segments = document.querySelector('.content img[src="pictures/' + chapter
                    + '-segments.svg"]');
                var after = (segments || img).closest('p') || segments || img;
                fetch('pictures/' + chapter + '-history.json').then(function (response) {
                    return response.ok ? response.json() : null;
                }).then(function (history) {
                    if (history !== null && history.trace.length > 0) {
                        buildView(history, after);
                    }
                    var streams = document.querySelector('.content img[src="pictures/' + chapter
                        + '-streams.svg"]');
                    if (history !== null && history.activity && history.activity.work.length > 0
                        && streams !== null) {
                        buildActivityView(history.activity, streams.closest('p') || streams);
                    }
                }).catch(function () {
                    // Opened from the disk (file://) or offline: the static pictures stay alone.
                });
            });
    }

    // The block pool of a chapter whose walkthrough served requests from one (chapter 13:
    // `pictures/<chapter>-blocks.json`, `steps` rows {step, running: [[request, tokens, total,
    // [blocks]]], waiting, preempted}): the pool, one cell per block coloured by the request
    // holding it, and each running request's block table, stepped through step by step.
    function buildBlockView(data, placeholder) {
        var steps = data.steps;
        var last = steps.length - 1;
        var view = element('section', 'wb-memview wb-kvview');
        view.setAttribute('aria-label', t('The block pool and the block tables, step by step'));
        view.appendChild(element('p', 'wb-mv-title', t('Step through {0} steps of a pool of {1} blocks of {2} tokens', steps.length, data.num_blocks, data.block_size)));
        var controls = addSteps(view, last, 'step');
        var said = element('p', 'wb-mv-event');
        said.setAttribute('aria-live', 'polite');
        view.appendChild(said);
        view.appendChild(element('p', 'wb-mv-segment-name', t('The pool (block numbers)')));
        var pool = element('div', 'wb-kv-pool');
        view.appendChild(pool);
        view.appendChild(element('p', 'wb-mv-segment-name',
                                 t('The block tables: each running request’s blocks, in token order')));
        var tables = element('div', 'wb-kv-tables');
        view.appendChild(tables);
        var info = element('p', 'wb-mv-block-info', t('Hover over or tap a block for what it holds.'));
        info.setAttribute('aria-live', 'polite');
        view.appendChild(info);
        var cell = function (block, request, filled) {
            var c = element('div', 'wb-kv-block' + (request === null ? ' wb-kv-free'
                                                    : ' wb-kv-r' + (request % 6)));
            c.setAttribute('data-block', String(block));
            c.tabIndex = 0;
            c.setAttribute('role', 'button');
            var words = request === null ? t('Block {0}: free', block)
                : t('Block {0}: request {1}, {2} of {3} tokens', block, request, filled,
                    data.block_size);
            c.setAttribute('aria-label', words);
            var fill = element('span', 'wb-kv-fill');
            fill.style.height = (request === null ? 0 : 100 * filled / data.block_size) + '%';
            c.append(fill, element('span', 'wb-kv-number', String(block)));
            var show = function () {
                info.textContent = words;
            };
            c.addEventListener('mouseenter', show);
            c.addEventListener('focus', show);
            c.addEventListener('click', show);
            return c;
        };
        view.go = function (i) {
            var current = Math.max(0, Math.min(last, i));
            view.current = current;
            controls.slider.value = String(current);
            var s = steps[current];
            // The simulator's own step number, as the line below says it ("Step 27"), and the
            // last one: never a second count of the same thing.
            controls.count.textContent = t('step {0} of {1}', s.step, steps[last].step);
            controls.previous.disabled = current === 0;
            controls.next.disabled = current === last;
            var owner = {};
            s.running.forEach(function (r) {
                r[3].forEach(function (b, k) {
                    owner[b] = [r[0], Math.min(data.block_size, r[1] - k * data.block_size)];
                });
            });
            var held = Object.keys(owner).length;
            said.textContent = t('Step {0}: {1} running, {2} of {3} blocks held, {4} waiting',
                                 s.step, s.running.length, held, data.num_blocks,
                                 s.waiting.length)
                + (s.preempted.length > 0 ? t('; preempted: request {0} (its blocks freed, to recompute)', s.preempted.join(', ')) : '');
            view.setAttribute('data-step', String(current));
            pool.textContent = '';
            for (var b = 0; b < data.num_blocks; b++) {
                var o = owner[b];
                pool.appendChild(cell(b, o ? o[0] : null, o ? o[1] : 0));
            }
            tables.textContent = '';
            s.running.forEach(function (r) {
                var row = element('div', 'wb-kv-table');
                row.setAttribute('data-request', String(r[0]));
                row.appendChild(element('div', 'wb-kv-name',
                    t('request {0} · {1} of {2} tokens', r[0], r[1], r[2])));
                var cells = element('div', 'wb-kv-cells');
                r[3].forEach(function (b, k) {
                    cells.appendChild(cell(b, r[0], Math.min(data.block_size,
                                                             r[1] - k * data.block_size)));
                });
                row.appendChild(cells);
                tables.appendChild(row);
            });
        };
        placeholder.textContent = '';
        placeholder.appendChild(view);
        view.go(0);
    }

    function addBlockViews() {
        document.querySelectorAll('.content .wb-blocks[data-src]').forEach(function (placeholder) {
            fetch(placeholder.getAttribute('data-src')).then(function (response) {
                return response.ok ? response.json() : null;
            }).then(function (data) {
                if (data !== null && data.steps.length > 0) {
                    buildBlockView(data, placeholder);
                }
            }).catch(function () {
                // Opened from the disk (file://) or offline: the placeholder's words stay.
            });
        });
    }

    function ready() {
        addLanguagePicker();
        labelTableCells();
        openGates();
        answerQuestions();
        showReview();
        showProgress();
        addHistoryViews();
        addBlockViews();
    }

    if (document.readyState === 'loading') {
        document.addEventListener('DOMContentLoaded', ready);
    } else {
        ready();
    }
})();
