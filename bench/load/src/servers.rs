//! The processes a load run measures: the hello-world baseline, `rampart serve`, and the Redis
//! and ClickHouse servers the shared-state and decision-log runs need (loopback only, started
//! here when no URL is given and the binaries are installed).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `cmd` on the servers' CPUs when the run pins (see [`crate::cpu`]).
fn place(cmd: &mut Command) {
    if let Some(p) = crate::cpu::placement() {
        p.place_server(cmd);
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A child process, killed when dropped.
pub struct Proc {
    pub child: Child,
    pub addr: SocketAddr,
    /// Starts the process again on the same address and data (Redis, ClickHouse).
    respawn: Option<Box<dyn Fn() -> Option<Child>>>,
    /// The path answering 200 when it is up (`None`: a TCP connect suffices).
    ready: Option<&'static str>,
    /// A command-line pattern of the real server when `child` is a launcher (`runuser`, which does
    /// not pass SIGKILL on): it is killed by that pattern too, so nothing outlives the run.
    pattern: Option<String>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Proc {
    fn new(child: Child, addr: SocketAddr) -> Proc {
        Proc {
            child,
            addr,
            respawn: None,
            ready: None,
            pattern: None,
        }
    }

    fn kill(&mut self) {
        if let Some(p) = &self.pattern {
            let _ = Command::new("pkill")
                .args(["-KILL", "-f", "--", p])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the process, waits a second, and starts it again on the same address and data.
    pub fn restart(&mut self) {
        self.kill();
        std::thread::sleep(Duration::from_secs(1));
        if let Some(child) = self.respawn.as_ref().and_then(|f| f()) {
            self.child = child;
        }
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            let up = match self.ready {
                Some(path) => wait_http(self.addr, path, Duration::from_millis(200)),
                None => std::net::TcpStream::connect(self.addr).is_ok(),
            };
            if up {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The process id (CPU time is read from `/proc/<pid>/stat`).
    pub fn pid(&self) -> Option<u32> {
        Some(self.child.id())
    }

    /// Resident memory of the process, from /proc.
    pub fn rss_bytes(&self) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kb: u64 = s
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kb * 1024)
    }
}

fn wait_http(addr: SocketAddr, path: &str, within: Duration) -> bool {
    use std::io::{Read, Write};
    let end = Instant::now() + within;
    while Instant::now() < end {
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            let _ = write!(
                s,
                "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
            );
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            if out.starts_with("HTTP/1.1 200") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The sum of every series of metric `name` (e.g. `rampart_redis_calls_total`) in an engine's
/// `/metrics`.
pub fn engine_metric(addr: SocketAddr, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let mut found = false;
    let sum = out
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .inspect(|_| found = true)
        .sum();
    found.then_some(sum)
}

/// The CPU time Redis has used so far (user + system, µs), from `INFO cpu`.
pub fn redis_cpu_us(addr: SocketAddr) -> Option<f64> {
    let text = redis_info(addr, "cpu")?;
    let field = |k: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(k))?
            .trim()
            .parse()
            .ok()
    };
    Some((field("used_cpu_sys:")? + field("used_cpu_user:")?) * 1e6)
}

/// Per command Redis has run so far: (name, calls, µs spent running it), from `INFO
/// commandstats` (the time inside the command, not the event loop's reading and writing).
pub fn redis_commandstats(addr: SocketAddr) -> Option<Vec<(String, f64, f64)>> {
    let text = redis_info(addr, "commandstats")?;
    Some(
        text.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let num = |k: &str| -> Option<f64> {
                    rest.split(',')
                        .find_map(|f| f.strip_prefix(k))?
                        .parse()
                        .ok()
                };
                Some((name.to_string(), num("calls=")?, num("usec=")?))
            })
            .collect(),
    )
}

/// One `INFO <section>` answer's text.
fn redis_info(addr: SocketAddr, section: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("INFO {section}\r\n").as_bytes()).ok()?;
    // One bulk string: `$<len>\r\n<text>\r\n`.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let text = loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let t = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = t.split_once("\r\n")?;
        let len: usize = head.strip_prefix('$')?.parse().ok()?;
        if body.len() >= len {
            break body[..len].to_string();
        }
    };
    Some(text)
}

/// The baseline: this binary's `baseline` subcommand, an actix-web server answering every
/// `POST /v1/decide` with a fixed small JSON after reading the body.
pub fn baseline(workers: usize) -> Proc {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    place(&mut cmd);
    let child = cmd
        .args([
            "baseline",
            "--listen",
            &addr.to_string(),
            "--workers",
            &workers.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the baseline");
    let p = Proc::new(child, addr);
    assert!(
        wait_http(addr, "/healthz", Duration::from_secs(10)),
        "the baseline did not start"
    );
    p
}

/// Serves the baseline (in the child).
pub fn serve_baseline(listen: &str, workers: usize) -> std::io::Result<()> {
    use actix_web::{web, App, HttpResponse, HttpServer};
    const ANSWER: &str = r#"{"action":"allow","code":"OK","status":200}"#;
    actix_web::rt::System::new().block_on(async move {
        HttpServer::new(|| {
            App::new()
                .route(
                    "/v1/decide",
                    web::post().to(|body: web::Bytes| async move {
                        let _ = body.len();
                        HttpResponse::Ok()
                            .content_type("application/json")
                            .body(ANSWER)
                    }),
                )
                .route(
                    "/healthz",
                    web::get().to(|| async { HttpResponse::Ok().body("ok") }),
                )
        })
        .workers(workers)
        .bind(listen)?
        .run()
        .await
    })
}

/// `rampart serve` with `config` (a TOML text without `[server] listen`, which is added).
pub fn engine(bin: &Path, dir: &Path, name: &str, config: &str) -> Proc {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let path = dir.join(format!("{name}.toml"));
    let text = if config.contains("[server]") {
        config.replacen("[server]", &format!("[server]\nlisten = \"{addr}\""), 1)
    } else {
        format!("[server]\nlisten = \"{addr}\"\n{config}")
    };
    std::fs::write(&path, text).expect("write the engine config");
    let mut cmd = Command::new(bin);
    place(&mut cmd);
    let child = cmd
        .args(["serve", "--config"])
        .arg(&path)
        .env("RAMPART_LOG_LEVEL", "warn")
        // Its own control store: engines of one run must not share rule set versions (the
        // default, `control` beside the decision log's directory, is one for the whole run, and an
        // engine importing its rules would make them every running engine's stable set).
        .env(
            "RAMPART_ADMIN_STATE_DIR",
            dir.join(format!("{name}-control")),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let p = Proc::new(child, addr);
    assert!(
        wait_http(addr, "/readyz", Duration::from_secs(30)),
        "engine {name} did not become ready"
    );
    p
}

/// A throwaway Redis on loopback, persistence off.
/// A Redis on loopback: on the servers' cores, or (`on_generator`) on the generator's.
pub fn redis(dir: &Path, on_generator: bool) -> Option<Proc> {
    let port = free_port();
    let dir = dir.to_path_buf();
    let spawn = move || {
        let mut cmd = Command::new("redis-server");
        match crate::cpu::placement() {
            Some(p) if on_generator => p.place_on_generator(&mut cmd),
            _ => place(&mut cmd),
        }
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
    };
    let child = spawn()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    let end = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Proc {
        child,
        addr,
        respawn: Some(Box::new(spawn)),
        ready: None,
        pattern: None,
    })
}

/// A throwaway ClickHouse on loopback (run as the package's `clickhouse` user).
pub fn clickhouse(dir: &Path) -> Option<Proc> {
    let exists = Path::new("/usr/sbin/clickhouse-server").exists()
        || Command::new("clickhouse-server")
            .arg("--help")
            .output()
            .is_ok();
    if !exists {
        return None;
    }
    let d: PathBuf = dir.join("clickhouse");
    std::fs::create_dir_all(&d).ok()?;
    let _ = Command::new("chown")
        .args(["-R", "clickhouse:clickhouse"])
        .arg(&d)
        .status();
    let (http, tcp, inter) = (free_port(), free_port(), free_port());
    let spawn = move || {
        let ds = d.display();
        let mut cmd = Command::new("runuser");
        place(&mut cmd);
        cmd.args(["-u", "clickhouse", "--", "clickhouse-server"])
            .arg("--config-file=/etc/clickhouse-server/config.xml")
            .arg("--")
            .arg(format!("--http_port={http}"))
            .arg(format!("--tcp_port={tcp}"))
            .arg(format!("--interserver_http_port={inter}"))
            .arg(format!("--path={ds}/"))
            .arg(format!("--tmp_path={ds}/tmp/"))
            .arg(format!("--user_files_path={ds}/user_files/"))
            .arg(format!("--format_schema_path={ds}/format_schemas/"))
            .arg(format!("--logger.log={ds}/server.log"))
            .arg(format!("--logger.errorlog={ds}/server.err.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()
    };
    let child = spawn()?;
    let addr: SocketAddr = format!("127.0.0.1:{http}").parse().ok()?;
    let p = Proc {
        child,
        addr,
        respawn: Some(Box::new(spawn)),
        ready: Some("/ping"),
        pattern: Some(format!("--http_port={http} ")),
    };
    wait_http(addr, "/ping", Duration::from_secs(60)).then_some(p)
}

/// nginx on loopback, round robin over `upstreams` (keep-alive to them), on the servers' CPUs;
/// None when nginx is not installed.
pub fn nginx(dir: &Path, name: &str, upstreams: &[SocketAddr]) -> Option<Proc> {
    let bin = ["/usr/sbin/nginx", "nginx"]
        .into_iter()
        .find(|b| Command::new(b).arg("-v").output().is_ok())?;
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    let d = dir.join(format!("nginx-{name}"));
    std::fs::create_dir_all(&d).ok()?;
    let servers: String = upstreams
        .iter()
        .map(|u| format!("    server {u};\n"))
        .collect();
    let dd = d.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {dd}/nginx.pid;\n\
         error_log {dd}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {dd}/body;\n  proxy_temp_path {dd}/proxy;\n\
         fastcgi_temp_path {dd}/fastcgi;\n  uwsgi_temp_path {dd}/uwsgi;\n  scgi_temp_path {dd}/scgi;\n\
         upstream rampart {{\n{servers}    keepalive 64;\n  }}\n\
         server {{\n    listen {addr};\n    location / {{\n      proxy_pass http://rampart;\n\
         proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n"
    );
    let path = d.join("nginx.conf");
    std::fs::write(&path, conf).ok()?;
    let mut cmd = Command::new(bin);
    place(&mut cmd);
    let child = cmd
        .arg("-c")
        .arg(&path)
        .arg("-p")
        .arg(&d)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let p = Proc::new(child, addr);
    let end = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(p)
}
