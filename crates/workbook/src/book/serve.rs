//! A small static file server for the built book, on 127.0.0.1 only (`workbook book --serve`,
//! `workbook start`), and opening it in a browser.

use anyhow::{Context, Result, anyhow};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The port tried first, as `mdbook serve` does.
pub const DEFAULT_PORT: u16 = 3000;

/// A request line and headers larger than this are refused.
const MAX_HEAD_BYTES: u64 = 64 * 1024;

/// A server bound to a port of 127.0.0.1, serving the files under a directory.
///
/// Each connection gets a thread of its own and one answer (`Connection: close`): a browser opens
/// several connections at once and every one of them is answered.
pub struct Server {
    listener: TcpListener,
    stopped: Arc<AtomicBool>,
    addr: SocketAddr,
    root: PathBuf,
    progress: Option<Progress>,
    /// The folder of the language the reader starts in (`ko/`), empty for English.
    language: String,
}

/// Makes [`PROGRESS_PATH`]'s answer: the learner's progress as JSON, read afresh per request.
pub type Progress = Arc<dyn Fn() -> Result<Vec<u8>> + Send + Sync>;

/// Where a served book finds the learner's progress (`workbook start`, `book --serve`); a book
/// served any other way, or opened from its files, has no such file, and its pages look as they
/// always do.
pub const PROGRESS_PATH: &str = "/workbook-progress.json";

/// Stops a [`Server`] from another thread.
#[derive(Clone)]
pub struct Stopper {
    stopped: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl Stopper {
    /// Makes [`Server::serve`] return.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// A server running on a thread of its own; dropping it stops the server and waits for it.
pub struct Running {
    stopper: Stopper,
    url: String,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// `http://127.0.0.1:PORT/`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stopper.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Server {
    /// Serves `root` on `127.0.0.1:port` (`0`: a free port the system picks).
    pub fn bind(root: &Path, port: u16) -> Result<Server> {
        let root =
            std::path::absolute(root).with_context(|| format!("resolving {}", root.display()))?;
        if !root.join("index.html").is_file() {
            return Err(anyhow!(
                "{} has no index.html: build the book first",
                root.display()
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .map_err(|e| anyhow!("cannot listen on 127.0.0.1:{port}: {e}"))?;
        let addr = listener.local_addr().context("the server has no address")?;
        Ok(Server {
            listener,
            stopped: Arc::new(AtomicBool::new(false)),
            addr,
            root,
            progress: None,
            language: String::new(),
        })
    }

    /// Serves `root` on `preferred`, or the next of a few ports after it when taken, or any free
    /// port. With the server comes, when it did not get `preferred`, a sentence saying why, for the
    /// learner to read before the address.
    pub fn bind_near(root: &Path, preferred: u16) -> Result<(Server, Option<String>)> {
        const TRIES: u16 = 10;
        let mut first_error = None;
        let mut bound = None;
        for port in (0..TRIES).filter_map(|i| preferred.checked_add(i)) {
            match Server::bind(root, port) {
                Ok(server) => {
                    bound = Some(server);
                    break;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let server = match bound {
            Some(server) => server,
            None => Server::bind(root, 0).map_err(|e| first_error.take().unwrap_or(e))?,
        };
        let note = first_error.map(|e| {
            format!(
                "Port {preferred} is taken ({e:#}; another `workbook start` or `book --serve`?): \
                 serving on port {} instead.",
                server.addr.port()
            )
        });
        Ok((server, note))
    }

    /// Answers [`PROGRESS_PATH`] with what `progress` makes.
    pub fn with_progress(mut self, progress: Progress) -> Server {
        self.progress = Some(progress);
        self
    }

    /// Starts the reader in the book in `lang` (built in its folder): [`Server::url`] leads
    /// there. `None`: English.
    pub fn with_language(mut self, lang: Option<&str>) -> Server {
        self.language = lang.map(|l| format!("{l}/")).unwrap_or_default();
        self
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/`, with the language's folder when it starts in one
    /// ([`Server::with_language`]).
    pub fn url(&self) -> String {
        format!("http://{}/{}", self.addr, self.language)
    }

    /// A handle that stops the server.
    pub fn stopper(&self) -> Stopper {
        Stopper {
            stopped: self.stopped.clone(),
            addr: self.addr,
        }
    }

    /// Answers requests until stopped.
    pub fn serve(&self) {
        for stream in self.listener.incoming() {
            if self.stopped.load(Ordering::SeqCst) {
                return;
            }
            // A connection that failed before it was accepted: wait for the next one.
            let Ok(stream) = stream else { continue };
            let root = self.root.clone();
            let progress = self.progress.clone();
            std::thread::spawn(move || answer(stream, &root, progress.as_ref()));
        }
    }

    /// Serves on a thread of its own until the returned handle is dropped.
    pub fn spawn(self) -> Running {
        let stopper = self.stopper();
        let url = self.url();
        let thread = std::thread::spawn(move || self.serve());
        Running {
            stopper,
            url,
            thread: Some(thread),
        }
    }
}

/// Reads one request from `stream` and answers it with the file it names (or the learner's
/// progress), or the book's 404 page.
fn answer(stream: TcpStream, root: &Path, progress: Option<&Progress>) {
    // A client that connects and says nothing must not hold a thread for ever.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new((&stream).take(MAX_HEAD_BYTES));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => return,
            Ok(_) if header.trim().is_empty() => break,
            Ok(_) => {}
        }
    }
    let mut words = request_line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or("/"));
    let mut out = &stream;
    if method != "GET" && method != "HEAD" {
        let _ = reply(
            &mut out,
            "405 Method Not Allowed",
            "text/plain",
            b"only GET and HEAD",
            true,
        );
        return;
    }
    if let Some(progress) = progress
        && target.split(['?', '#']).next() == Some(PROGRESS_PATH)
    {
        let (status, body) = match progress() {
            Ok(body) => ("200 OK", body),
            Err(e) => (
                "500 Internal Server Error",
                format!("{{\"error\": {:?}}}", format!("{e:#}")).into_bytes(),
            ),
        };
        let _ = reply(&mut out, status, "application/json", &body, method == "GET");
        return;
    }
    let (status, path) = match resolve(root, target) {
        Some(path) => ("200 OK", path),
        None => ("404 Not Found", root.join("404.html")),
    };
    let body = std::fs::read(&path).unwrap_or_else(|_| b"not found".to_vec());
    let _ = reply(
        &mut out,
        status,
        content_type(&path),
        &body,
        method == "GET",
    );
}

fn reply(
    out: &mut impl Write,
    status: &str,
    kind: &str,
    body: &[u8],
    with_body: bool,
) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if with_body {
        out.write_all(body)?;
    }
    out.flush()
}

/// The file a request's path names under `root`: percent-decoded, `index.html` for a directory,
/// and never outside `root` (`..`, absolute paths and links leading out are refused).
pub fn resolve(root: &Path, url: &str) -> Option<PathBuf> {
    let path = url.split(['?', '#']).next().unwrap_or("");
    let decoded = percent_decode(path)?;
    let mut out = root.to_path_buf();
    for component in Path::new(decoded.trim_start_matches('/')).components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => return None,
        }
    }
    if out.is_dir() {
        out.push("index.html");
    }
    let real = out.canonicalize().ok()?;
    let real_root = root.canonicalize().ok()?;
    (real.starts_with(&real_root) && real.is_file()).then_some(real)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let text = String::from_utf8(out).ok()?;
    (!text.contains('\0')).then_some(text)
}

fn content_type(path: &Path) -> &'static str {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("ico") => "image/x-icon",
        Some("woff") => "font/woff",
        Some("woff2") => "font/woff2",
        Some("ttf") => "font/ttf",
        Some("otf") => "font/otf",
        Some("txt" | "md" | "rs" | "toml") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Opens `target` (a URL or a file) in the desktop's browser; failing is the caller's warning.
pub fn open_in_browser(target: &str) -> Result<()> {
    let mut cmd = if cfg!(target_os = "macos") {
        std::process::Command::new("open")
    } else if cfg!(windows) {
        let mut cmd = std::process::Command::new("cmd");
        cmd.args(["/C", "start", ""]);
        cmd
    } else {
        std::process::Command::new("xdg-open")
    };
    cmd.arg(target)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let program = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {program} to open {target}"))?;
    // An opener that fails (no display, no browser) says so at once; one that stays running has
    // started a browser and may wait for it to close: leave it be.
    for _ in 0..20 {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(anyhow!("{program} failed ({status})")),
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(100)),
            Err(e) => return Err(e).with_context(|| format!("waiting for {program}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_connection_of_a_burst_is_answered() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "home").unwrap();
        let server = Server::bind(dir.path(), 0).unwrap();
        let addr = server.addr();
        let _running = server.spawn();
        // A browser opens several keep-alive connections at once; all must get an answer.
        let mut streams: Vec<std::net::TcpStream> = (0..8)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        for s in &mut streams {
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
                .unwrap();
        }
        for s in &mut streams {
            s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
            assert!(answer.ends_with("home"), "{answer}");
        }
    }

    #[test]
    fn only_get_and_head_are_answered_and_missing_files_get_404() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "home").unwrap();
        std::fs::write(dir.path().join("404.html"), "lost").unwrap();
        let server = Server::bind(dir.path(), 0).unwrap();
        let addr = server.addr();
        let _running = server.spawn();
        let ask = |request: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(request.as_bytes()).unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            answer
        };
        assert!(ask("POST / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        let missing = ask("GET /nope.html HTTP/1.1\r\n\r\n");
        assert!(
            missing.starts_with("HTTP/1.1 404") && missing.ends_with("lost"),
            "{missing}"
        );
        let head = ask("HEAD / HTTP/1.1\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
    }

    #[test]
    fn resolve_stays_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "home").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a page.html"), "a").unwrap();
        let root = dir.path();
        let real = |p: &str| root.join(p).canonicalize().unwrap();
        assert_eq!(resolve(root, "/"), Some(real("index.html")));
        assert_eq!(
            resolve(root, "/sub/a%20page.html?x=1#top"),
            Some(real("sub/a page.html"))
        );
        assert_eq!(resolve(root, "/../etc/passwd"), None);
        assert_eq!(resolve(root, "/sub/%2e%2e/%2e%2e/etc/passwd"), None);
        assert_eq!(resolve(root, "/missing.html"), None);
        assert_eq!(resolve(root, "/%zz"), None);
    }
}
