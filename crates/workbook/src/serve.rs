//! A small static file server for the built book, on 127.0.0.1 only (`workbook book --serve`,
//! `workbook start`), and opening it in a browser.

use anyhow::{Context, Result, anyhow};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tiny_http::{Header, Method, Request, Response, StatusCode};

/// The port tried first, as `mdbook serve` does.
pub const DEFAULT_PORT: u16 = 3000;

/// A server bound to a port of 127.0.0.1, serving the files under a directory.
pub struct Server {
    http: Arc<tiny_http::Server>,
    stopped: Arc<AtomicBool>,
    addr: SocketAddr,
    root: PathBuf,
}

/// Stops a [`Server`] from another thread.
#[derive(Clone)]
pub struct Stopper {
    http: Arc<tiny_http::Server>,
    stopped: Arc<AtomicBool>,
}

impl Stopper {
    /// Makes [`Server::serve`] return after the request in hand.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.http.unblock();
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
        let http = tiny_http::Server::http((Ipv4Addr::LOCALHOST, port))
            .map_err(|e| anyhow!("cannot listen on 127.0.0.1:{port}: {e}"))?;
        let addr = http
            .server_addr()
            .to_ip()
            .context("the server has no IP address")?;
        Ok(Server {
            http: Arc::new(http),
            stopped: Arc::new(AtomicBool::new(false)),
            addr,
            root,
        })
    }

    /// Serves `root` on `preferred`, or the next of a few ports after it when taken, or any free
    /// port.
    pub fn bind_near(root: &Path, preferred: u16) -> Result<Server> {
        const TRIES: u16 = 10;
        let mut last = None;
        for port in (0..TRIES).filter_map(|i| preferred.checked_add(i)) {
            match Server::bind(root, port) {
                Ok(server) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Server::bind(root, 0).map_err(|e| last.unwrap_or(e))
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// A handle that stops the server.
    pub fn stopper(&self) -> Stopper {
        Stopper {
            http: self.http.clone(),
            stopped: self.stopped.clone(),
        }
    }

    /// Answers requests until stopped.
    pub fn serve(&self) {
        while !self.stopped.load(Ordering::SeqCst) {
            match self.http.recv() {
                Ok(request) => respond(&self.root, request),
                // A connection that failed, or the stopper's wake-up: look at the flag again.
                Err(_) => continue,
            }
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

fn respond(root: &Path, request: Request) {
    if !matches!(request.method(), Method::Get | Method::Head) {
        let _ = request.respond(Response::from_string("only GET and HEAD").with_status_code(405));
        return;
    }
    let found = resolve(root, request.url()).and_then(|path| {
        std::fs::File::open(&path)
            .ok()
            .map(|file| (file, content_type(&path)))
    });
    let response = match found {
        Some((file, kind)) => Response::from_file(file).with_header(header(kind)),
        None => match std::fs::File::open(root.join("404.html")) {
            Ok(file) => Response::from_file(file)
                .with_header(header("text/html; charset=utf-8"))
                .with_status_code(StatusCode(404)),
            Err(_) => {
                let _ = request.respond(Response::from_string("not found").with_status_code(404));
                return;
            }
        },
    };
    let _ = request.respond(response);
}

fn header(content_type: &str) -> Header {
    Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
        .expect("a content type is a valid header")
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
