//! The pieces of `watch` and of the book server, without timing assertions: the change detector,
//! the loop's debouncing over a channel, the watchers over a temporary directory (a bounded wait
//! for their event), the fallback to polling, and real HTTP requests to the server.

use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::Duration;
use workbook::book::serve::Server;
use workbook::commands::watch::{self, ChangeDetector, Mode, Signal};

/// Long enough for any machine; the tests never wait this long when things work.
const BOUND: Duration = Duration::from_secs(20);

#[test]
fn the_detector_sees_new_contents_not_touches() {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("lib.rs");
    std::fs::write(&file, "fn a() {}").expect("written");
    let mut detector = ChangeDetector::new();
    assert!(
        detector.changed(dir.path()).expect("read"),
        "the first look"
    );
    assert!(!detector.changed(dir.path()).expect("read"));
    // Same bytes written again: a save that changed nothing.
    std::fs::write(&file, "fn a() {}").expect("written");
    assert!(!detector.changed(dir.path()).expect("read"));
    std::fs::write(dir.path().join("notes.txt"), "not code").expect("written");
    assert!(!detector.changed(dir.path()).expect("read"));
    std::fs::write(&file, "fn b() {}").expect("written");
    assert!(detector.changed(dir.path()).expect("read"));
    std::fs::create_dir(dir.path().join("sub")).expect("a directory");
    std::fs::write(dir.path().join("sub/more.rs"), "fn c() {}").expect("written");
    assert!(detector.changed(dir.path()).expect("read"));
}

/// Runs the loop over signals already queued (the senders then gone) and counts the checks.
fn checks_after(signals: &[Signal], dir: &std::path::Path, detector: &mut ChangeDetector) -> usize {
    let (tx, rx) = mpsc::channel();
    for s in signals {
        tx.send(s.clone()).expect("queued");
    }
    drop(tx);
    let mut checks = 0;
    watch::run_loop(&rx, Duration::from_millis(10), dir, detector, &mut || {
        checks += 1
    })
    .expect("the loop runs");
    checks
}

#[test]
fn a_burst_of_events_is_one_check_and_only_when_the_code_changed() {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("lib.rs");
    std::fs::write(&file, "fn a() {}").expect("written");
    let mut detector = ChangeDetector::new();
    detector.changed(dir.path()).expect("the baseline");

    std::fs::write(&file, "fn b() {}").expect("written");
    let burst = [Signal::Changed, Signal::Changed, Signal::Changed];
    assert_eq!(checks_after(&burst, dir.path(), &mut detector), 1);

    // Events, but the same code: no check.
    assert_eq!(checks_after(&burst, dir.path(), &mut detector), 0);

    // A watcher error is reported and the loop goes on.
    std::fs::write(&file, "fn c() {}").expect("written");
    let with_error = [
        Signal::Error("a hiccup".into()),
        Signal::Changed,
        Signal::Error("another".into()),
    ];
    assert_eq!(checks_after(&with_error, dir.path(), &mut detector), 1);

    // Quit wins over a pending check.
    std::fs::write(&file, "fn d() {}").expect("written");
    let quit = [Signal::Changed, Signal::Quit, Signal::Changed];
    assert_eq!(checks_after(&quit, dir.path(), &mut detector), 0);
}

fn first_change(rx: &mpsc::Receiver<Signal>) -> Signal {
    loop {
        match rx.recv_timeout(BOUND) {
            Ok(Signal::Error(_)) => continue,
            Ok(signal) => return signal,
            Err(e) => panic!("no event within {BOUND:?}: {e}"),
        }
    }
}

#[test]
fn the_polling_watcher_sees_a_save() {
    let dir = tempfile::tempdir().expect("a directory");
    std::fs::write(dir.path().join("lib.rs"), "fn a() {}").expect("written");
    let (tx, rx) = mpsc::channel();
    let watcher = watch::start(
        dir.path(),
        Mode::Poll(Duration::from_millis(20)),
        Duration::from_millis(20),
        tx,
    )
    .expect("the poller starts");
    assert_eq!(watcher.mode, Mode::Poll(Duration::from_millis(20)));
    std::fs::write(dir.path().join("lib.rs"), "fn b() {}").expect("written");
    assert_eq!(first_change(&rx), Signal::Changed);
}

#[test]
fn the_event_watcher_sees_a_save() {
    let dir = tempfile::tempdir().expect("a directory");
    let (tx, rx) = mpsc::channel();
    // Where events cannot start, this is the poller: the save is seen either way.
    let _watcher = watch::start(dir.path(), Mode::Events, Duration::from_millis(20), tx)
        .expect("a watcher starts");
    std::fs::write(dir.path().join("lib.rs"), "fn b() {}").expect("written");
    assert_eq!(first_change(&rx), Signal::Changed);
}

#[test]
fn a_watcher_that_cannot_start_gives_way_to_polling() {
    let dir = tempfile::tempdir().expect("a directory");
    let (tx, _rx) = mpsc::channel::<Signal>();
    let interval = Duration::from_millis(20);
    let watcher = watch::with_fallback(
        || Err(notify::Error::generic("no inotify instances left")),
        || {
            let tx = tx.clone();
            let mut poller = notify::PollWatcher::new(
                move |_: notify::Result<notify::Event>| {
                    let _ = tx.send(Signal::Changed);
                },
                notify::Config::default().with_poll_interval(interval),
            )?;
            notify::Watcher::watch(&mut poller, dir.path(), notify::RecursiveMode::Recursive)?;
            Ok(Box::new(poller) as Box<dyn notify::Watcher + Send>)
        },
        interval,
    )
    .expect("the fallback starts");
    assert_eq!(watcher.mode, Mode::Poll(interval));
}

#[test]
fn reads_and_opens_are_not_changes() {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
    assert!(!watch::is_change(&EventKind::Access(AccessKind::Open(
        AccessMode::Any
    ))));
    assert!(!watch::is_change(&EventKind::Access(AccessKind::Close(
        AccessMode::Read
    ))));
    assert!(watch::is_change(&EventKind::Access(AccessKind::Close(
        AccessMode::Write
    ))));
    assert!(watch::is_change(&EventKind::Modify(ModifyKind::Any)));
    assert!(watch::is_change(&EventKind::Create(CreateKind::File)));
}

/// A GET over a fresh connection with a bounded wait: (status line, body).
fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(BOUND)).expect("a timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

#[test]
fn the_server_answers_on_loopback_and_stays_inside_its_folder() {
    let dir = tempfile::tempdir().expect("a directory");
    let site = dir.path().join("site");
    std::fs::create_dir_all(site.join("css")).expect("a directory");
    std::fs::write(site.join("index.html"), "<p>home</p>").expect("written");
    std::fs::write(site.join("404.html"), "<p>lost</p>").expect("written");
    std::fs::write(site.join("css/book.css"), "body {}").expect("written");
    std::fs::write(dir.path().join("secret.txt"), "private").expect("written");

    let server = Server::bind(&site, 0).expect("binds an ephemeral port");
    let addr = server.addr();
    assert!(addr.ip().is_loopback(), "{addr}");
    let running = server.spawn();
    assert_eq!(running.url(), format!("http://{addr}/"));

    let (status, body) = get(addr, "/");
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 200 OK", "<p>home</p>")
    );
    let (status, body) = get(addr, "/css/book.css");
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 200 OK", "body {}")
    );
    let (status, body) = get(addr, "/missing.html");
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 404 Not Found", "<p>lost</p>")
    );
    let (status, body) = get(addr, "/../secret.txt");
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
    assert!(!body.contains("private"));
    let (status, _) = get(addr, "/%2e%2e/secret.txt");
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");

    // Dropping the handle stops the server and waits for it.
    drop(running);
}

#[test]
fn a_folder_without_index_html_is_not_served() {
    let dir = tempfile::tempdir().expect("a directory");
    let err = Server::bind(dir.path(), 0)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("has no index.html: build the book first"),
        "{err}"
    );
}
