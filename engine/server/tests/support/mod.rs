//! Real services for the integration tests: `redis-server` processes on loopback ports (one node,
//! or a 3-master cluster joined with `redis-cli --cluster create`) and `rampart serve` processes.
//! Everything is started by the test that needs it and stopped when it is dropped. The test command
//! (`scripts/test.sh`) installs `redis-server` when it is missing.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `rampart` binary: `RAMPART_BIN` when set; else the one Cargo names to the server's own
/// tests; other packages' tests (the pipeline's) find it in the same target directory as their
/// own executable.
pub fn bin() -> PathBuf {
    // Another build under test (e.g. an earlier commit's, to see a new test fail on it).
    if let Some(p) = std::env::var_os("RAMPART_BIN") {
        return PathBuf::from(p);
    }
    if let Some(p) = option_env!("CARGO_BIN_EXE_rampart") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let p = dir.join("rampart");
    assert!(
        p.exists(),
        "{} is missing: build it first (cargo build --release -p rampart)",
        p.display()
    );
    p
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rampart-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn need(tool: &str) {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "`{tool}` is not installed: these tests run against real Redis servers \
         (scripts/test.sh installs the redis-server package)"
    );
}

/// `redis-cli -p PORT args…`, its stdout.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One `redis-server` on a loopback port, persistence off.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    cluster: bool,
    /// Extra `redis-server` arguments.
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_on(free_port(), false)
    }

    /// A replica of `master` (`--replicaof`), once it is in sync.
    pub fn start_replica_of(master: &RedisServer) -> RedisServer {
        let r = Self::start_with(
            free_port(),
            false,
            &["--replicaof", "127.0.0.1", &master.port.to_string()],
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !r
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            assert!(Instant::now() < deadline, "replica did not sync");
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    fn start_on(port: u16, cluster: bool) -> RedisServer {
        Self::start_with(port, cluster, &[])
    }

    fn start_with(port: u16, cluster: bool, extra: &[&str]) -> RedisServer {
        need("redis-server");
        let dir = temp_dir(&format!("redis-{port}"));
        let mut s = RedisServer {
            port,
            dir,
            cluster,
            extra: extra.iter().map(|a| a.to_string()).collect(),
            child: None,
        };
        // A port picked here can be taken before the server binds it (by another test's
        // server): then this one exits, or the other answers for it. Try another port.
        for _ in 0..5 {
            if s.spawn() {
                return s;
            }
            s.port = free_port();
            s.dir = temp_dir(&format!("redis-{}", s.port));
        }
        panic!("redis-server did not start on any of five free ports");
    }

    /// Starts the server on `self.port`; `false` when the port was taken (this server exited, or
    /// another answered there).
    fn spawn(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--dir",
            self.dir.to_str().unwrap(),
        ]);
        if self.cluster {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
            ]);
        }
        cmd.args(&self.extra);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis_cli(self.port, &["PING"]) != "PONG" {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return false;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The server that answered is this one.
        let mine = redis_cli(self.port, &["INFO", "server"])
            .lines()
            .any(|l| l.trim() == format!("process_id:{pid}"));
        if !mine {
            self.kill();
        }
        mine
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: the server is gone at once, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether this server was started and not killed.
    pub fn alive(&self) -> bool {
        self.child.is_some()
    }

    /// `INFO replication`'s `role` (`master` / `slave`).
    pub fn role(&self) -> String {
        self.cli(&["INFO", "replication"])
            .lines()
            .find_map(|l| l.strip_prefix("role:"))
            .unwrap_or("")
            .trim()
            .to_string()
    }

    /// A fresh server on the same port (empty: persistence is off).
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.spawn(), "port {} was taken meanwhile", self.port);
    }

    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args)
    }

    /// `INFO memory`'s `used_memory`.
    pub fn used_memory(&self) -> u64 {
        self.cli(&["INFO", "memory"])
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("used_memory")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of `n` masters (no replicas) on loopback ports.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(n: usize) -> RedisCluster {
        let c = Self::create(n, 0, &[]);
        let deadline = Instant::now() + Duration::from_secs(20);
        for s in &c.nodes {
            while !s.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
                assert!(Instant::now() < deadline, "cluster did not become ok");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        c
    }

    /// `masters × (1 + replicas)` nodes started with `extra` and joined by `redis-cli --cluster
    /// create`.
    fn create(masters: usize, replicas: usize, extra: &[&str]) -> RedisCluster {
        need("redis-cli");
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_with(free_port(), true, extra))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        RedisCluster { nodes }
    }

    /// The nodes as a TOML array's items (`"redis://…", "redis://…"`), for
    /// `[state] redis_cluster_nodes`.
    pub fn toml_nodes(&self) -> String {
        self.urls()
            .iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `masters` masters with one replica each (`--cluster-replicas 1`), failing over fast: a
    /// master silent for 1 s is failed, and a replica takes over however stale its copy is
    /// (`cluster-replica-validity-factor 0`), which is what lets a test show a failover that
    /// forgets writes. The other masters serve their slots while one is down
    /// (`cluster-require-full-coverage no`, as `docs/deployment.md` advises).
    pub fn start_replicated(masters: usize) -> RedisCluster {
        let extra = [
            "--cluster-node-timeout",
            "1000",
            "--cluster-replica-validity-factor",
            "0",
            "--cluster-require-full-coverage",
            "no",
        ];
        let c = Self::create(masters, 1, &extra);
        c.wait_replicated(masters);
        c
    }

    /// Waits until the cluster is ok with `masters` masters, each with a replica in sync.
    pub fn wait_replicated(&self, masters: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self
                .nodes
                .iter()
                .filter(|s| s.child.is_some())
                .all(|s| s.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            let pairs = self.pairs();
            let synced = pairs.len() == masters
                && pairs.iter().all(|&(_, r)| {
                    self.nodes[r]
                        .cli(&["INFO", "replication"])
                        .contains("master_link_status:up")
                });
            if ok && synced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "replicated cluster did not become ok"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// (master, replica) indices into `nodes` of every live master with a live replica, as
    /// `CLUSTER NODES` on a live node tells them.
    pub fn pairs(&self) -> Vec<(usize, usize)> {
        let Some(seen) = self.nodes.iter().find(|n| n.child.is_some()) else {
            return Vec::new();
        };
        let table = seen.cli(&["CLUSTER", "NODES"]);
        let rows: Vec<(String, u16, String, String)> = table
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let port = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                Some((
                    f[0].to_string(),
                    port,
                    f.get(2)?.to_string(),
                    f.get(3)?.to_string(),
                ))
            })
            .collect();
        let index = |port: u16| self.nodes.iter().position(|n| n.port == port);
        let mut out = Vec::new();
        for (id, port, flags, _) in &rows {
            if !flags.contains("master") || flags.contains("fail") {
                continue;
            }
            let replica = rows
                .iter()
                .find(|(_, _, f, m)| f.contains("slave") && !f.contains("fail") && m == id);
            if let (Some(m), Some(r)) = (index(*port), replica.and_then(|r| index(r.1))) {
                if self.nodes[m].child.is_some() && self.nodes[r].child.is_some() {
                    out.push((m, r));
                }
            }
        }
        out.sort();
        out
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|s| s.url()).collect()
    }
}

/// A `clickhouse-server` on loopback ports, run as the `clickhouse` user (as the Debian package
/// expects) with its data in a fresh directory.
pub struct ClickHouseServer {
    pub http_port: u16,
    pub tcp_port: u16,
    inter_port: u16,
    /// The server's config file (`/etc/clickhouse-server/config.xml` unless a cluster node's).
    config: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

impl ClickHouseServer {
    pub fn start() -> ClickHouseServer {
        assert!(
            Path::new("/usr/sbin/clickhouse-server").exists()
                || Command::new("clickhouse-server")
                    .arg("--help")
                    .output()
                    .is_ok(),
            "clickhouse-server is not installed (scripts/test.sh installs the Debian package)"
        );
        let dir = temp_dir(&format!("clickhouse-{}", free_port()));
        Self::start_in(dir, free_port(), free_port(), None)
    }

    /// A server in `dir` on the given ports, with `config` (a file in `dir`) instead of the
    /// package's.
    fn start_in(dir: PathBuf, http_port: u16, tcp_port: u16, config: Option<PathBuf>) -> Self {
        let _ = Command::new("chown")
            .args(["-R", "clickhouse:clickhouse", dir.to_str().unwrap()])
            .status();
        let mut s = ClickHouseServer {
            http_port,
            tcp_port,
            inter_port: free_port(),
            config: config.unwrap_or_else(|| "/etc/clickhouse-server/config.xml".into()),
            dir,
            child: None,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let d = self.dir.display().to_string();
        let child = Command::new("runuser")
            .args(["-u", "clickhouse", "--", "clickhouse-server"])
            .arg(format!("--config-file={}", self.config.display()))
            .arg("--")
            .arg(format!("--http_port={}", self.http_port))
            .arg(format!("--tcp_port={}", self.tcp_port))
            .arg(format!("--interserver_http_port={}", self.inter_port))
            .arg(format!("--path={d}/"))
            .arg(format!("--tmp_path={d}/tmp/"))
            .arg(format!("--user_files_path={d}/user_files/"))
            .arg(format!("--format_schema_path={d}/format_schemas/"))
            .arg(format!("--logger.log={d}/server.log"))
            .arg(format!("--logger.errorlog={d}/server.err.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start clickhouse-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self
            .query("SELECT 1")
            .map(|r| r.trim().to_string())
            .ok()
            .as_deref()
            != Some("1")
        {
            assert!(Instant::now() < deadline, "clickhouse-server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        // The server that answered is this one: its ports were picked before it bound them, and
        // another test's server could have taken one meanwhile. A system table's metadata lies
        // under the server's path (a version that does not say cannot be told apart).
        let path = self
            .query("SELECT metadata_path FROM system.tables WHERE database = 'system' LIMIT 1")
            .unwrap_or_default();
        let path = path.trim();
        assert!(
            path.is_empty() || path.starts_with(&format!("{d}/")),
            "another server answers on port {}: its tables are in {path}",
            self.http_port
        );
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Runs a query over HTTP; its body.
    pub fn query(&self, sql: &str) -> Result<String, String> {
        let mut r = agent()
            .post(&self.url())
            .send(sql)
            .map_err(|e| e.to_string())?;
        let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
        if r.status() == 200 {
            Ok(body)
        } else {
            Err(body)
        }
    }

    pub fn count(&self, sql: &str) -> u64 {
        self.query(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// Stops the server (SIGKILL, as in a crash) and waits until it is gone.
    pub fn stop(&mut self) {
        assert!(self.kill(), "clickhouse-server did not stop");
    }

    fn kill(&mut self) -> bool {
        if let Some(mut c) = self.child.take() {
            // runuser forwards the signal to the server.
            let _ = Command::new("pkill")
                .args([
                    "-KILL",
                    "-f",
                    "--",
                    &format!("--http_port={} ", self.http_port),
                ])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.query("SELECT 1").is_ok() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        true
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// The server's data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for ClickHouseServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A standalone ZooKeeper (Debian's `zookeeper` package) on a loopback port, for a ClickHouse
/// cluster's replication and distributed DDL.
pub struct ZooKeeper {
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

impl ZooKeeper {
    pub fn start() -> ZooKeeper {
        assert!(
            Path::new("/usr/share/java/zookeeper.jar").exists(),
            "zookeeper is not installed (scripts/test.sh installs the Debian package)"
        );
        let port = free_port();
        let dir = temp_dir(&format!("zookeeper-{port}"));
        let child = Command::new("java")
            .arg("-Dzookeeper.4lw.commands.whitelist=srvr")
            .args(["-cp", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"])
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(port.to_string())
            .arg(dir.join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start zookeeper (java)");
        let z = ZooKeeper { port, dir, child };
        // Serving, not merely listening: ClickHouse 18.16 crashes (in its DDL worker) when its
        // first ZooKeeper session fails.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !z.serving() {
            assert!(Instant::now() < deadline, "zookeeper did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        z
    }

    fn serving(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
        let mut out = String::new();
        c.write_all(b"srvr").is_ok()
            && c.read_to_string(&mut out).is_ok()
            && out.contains("Mode: standalone")
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A ClickHouse cluster named `rampart` on loopback: `shards` × `replicas` servers, each with
/// the package's config plus `remote_servers`, `zookeeper`, `macros` (`{shard}` = `01`…,
/// `{replica}` = `r1`…) and `interserver_http_host`, and one ZooKeeper.
pub struct ClickHouseCluster {
    /// Shard-major: shard 1's replicas, then shard 2's…
    pub nodes: Vec<ClickHouseServer>,
    pub replicas: usize,
    pub zookeeper: ZooKeeper,
}

impl ClickHouseCluster {
    pub fn start(shards: usize, replicas: usize) -> ClickHouseCluster {
        let zookeeper = ZooKeeper::start();
        let ports: Vec<(u16, u16)> = (0..shards * replicas)
            .map(|_| (free_port(), free_port()))
            .collect();
        let mut remote = String::from("<remote_servers><rampart>");
        for s in 0..shards {
            remote.push_str("<shard><internal_replication>true</internal_replication>");
            for r in 0..replicas {
                remote.push_str(&format!(
                    "<replica><host>127.0.0.1</host><port>{}</port></replica>",
                    ports[s * replicas + r].1
                ));
            }
            remote.push_str("</shard>");
        }
        remote.push_str("</rampart></remote_servers>");
        let package = std::fs::read_to_string("/etc/clickhouse-server/config.xml")
            .expect("clickhouse-server is not installed (scripts/test.sh installs it)");
        let start = package
            .find("<remote_servers")
            .expect("<remote_servers> in the package's config");
        let end = package[start..].find("</remote_servers>").unwrap() + start;
        let base = format!(
            "{}{remote}{}",
            &package[..start],
            &package[end + "</remote_servers>".len()..]
        )
        .replace(
            "<zookeeper incl=\"zookeeper-servers\" optional=\"true\" />",
            &format!(
                "<zookeeper><node><host>127.0.0.1</host><port>{}</port></node></zookeeper>\
                 <interserver_http_host>127.0.0.1</interserver_http_host>",
                zookeeper.port
            ),
        );
        let nodes = (0..shards * replicas)
            .map(|i| {
                let (s, r) = (i / replicas + 1, i % replicas + 1);
                let dir = temp_dir(&format!("clickhouse-{s}-{r}-{}", ports[i].0));
                let conf = base.replace(
                    "<macros incl=\"macros\" optional=\"true\" />",
                    &format!("<macros><shard>{s:02}</shard><replica>r{r}</replica></macros>"),
                );
                std::fs::write(dir.join("config.xml"), conf).unwrap();
                std::fs::copy("/etc/clickhouse-server/users.xml", dir.join("users.xml")).unwrap();
                let cfg = dir.join("config.xml");
                ClickHouseServer::start_in(dir, ports[i].0, ports[i].1, Some(cfg))
            })
            .collect();
        ClickHouseCluster {
            nodes,
            replicas,
            zookeeper,
        }
    }

    /// The server of replica `r` (0-based) of shard `s` (0-based).
    pub fn node(&mut self, s: usize, r: usize) -> &mut ClickHouseServer {
        &mut self.nodes[s * self.replicas + r]
    }
}

/// An nginx (Debian's `nginx-light`) on loopback, in the foreground, killed when dropped.
pub struct Nginx(Child);

impl Nginx {
    /// Runs nginx with `http` as the body of its `http { … }` block (logs and temporary files
    /// in `dir`) and waits until `listen` accepts connections.
    pub fn start(dir: &Path, http: &str, listen: u16) -> Nginx {
        let bin = if Path::new("/usr/sbin/nginx").exists() {
            "/usr/sbin/nginx"
        } else {
            "nginx"
        };
        assert!(
            Command::new(bin).arg("-v").output().is_ok(),
            "nginx is not installed (scripts/test.sh installs the Debian package)"
        );
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/nginx-error.log warn;\nevents {{ worker_connections 256; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             {http}\n}}\n"
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new(bin)
            .args(["-c", path.to_str().unwrap(), "-p", dir.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let n = Nginx(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not start: {}",
                std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        n
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `rampart serve` process.
pub struct Engine {
    child: Child,
    pub base: String,
    /// This engine's control directory (`RAMPART_ADMIN_STATE_DIR`).
    pub control: PathBuf,
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

impl Engine {
    /// Starts an engine with `config` (TOML without `[server]`, which is added here) and waits
    /// until it is ready.
    pub fn start(dir: &Path, name: &str, config: &str) -> Engine {
        Engine::start_with_env(dir, name, config, &[])
    }

    /// [`Engine::start`] with extra environment variables (`RAMPART_SERVER_…` overrides for the
    /// `[server]` section this harness writes).
    pub fn start_with_env(dir: &Path, name: &str, config: &str, env: &[(&str, &str)]) -> Engine {
        // Port 0: the engine binds a port the OS chooses and names it in its log. A port picked
        // here and bound there could be taken in between by another test's server, whose
        // `/readyz` would then answer for this one.
        Engine::start_at(dir, name, config, env, 0)
    }

    /// [`Engine::start_with_env`] listening on `port` (e.g. an instance restarted where a load
    /// balancer expects it; 0: a free port the OS chooses).
    pub fn start_at(
        dir: &Path,
        name: &str,
        config: &str,
        env: &[(&str, &str)],
        port: u16,
    ) -> Engine {
        let cfg = dir.join(format!("{name}.toml"));
        let log = dir.join(format!("{name}-log"));
        std::fs::write(
            &cfg,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\ninstance = \"{name}\"\n\
                 [decision_log]\ndir = \"{}\"\n{config}",
                log.display()
            ),
        )
        .unwrap();
        let stderr_path = dir.join(format!("{name}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let control = dir.join(format!("{name}-control"));
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--config", cfg.to_str().unwrap()])
            .env("RAMPART_ADMIN_STATE_DIR", &control);
        // Most tests upload plain rule sets; the pipeline's tests configure signing themselves.
        if !config.contains("allow_unsigned_uploads") {
            cmd.env("RAMPART_ADMIN_ALLOW_UNSIGNED_UPLOADS", "true");
        }
        let mut child = cmd
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let said = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(30);
        // The port this engine bound, from its log line `rampart listening on SCHEME://IP:PORT`
        // (written once the port is bound, before it serves).
        let (tls, port) = loop {
            let text = said();
            if let Some(at) = text.find("rampart listening on ") {
                let rest = &text[at + "rampart listening on ".len()..];
                let url: String = rest
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != '"')
                    .collect();
                let bound: u16 = url
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or_else(|| panic!("engine {name}: no port in {url:?}"));
                assert!(
                    port == 0 || bound == port,
                    "engine {name} bound {bound}, not {port}"
                );
                break (url.starts_with("https://"), bound);
            }
            if let Some(st) = child.try_wait().unwrap() {
                panic!("engine {name} exited ({st}) before listening: {}", text);
            }
            assert!(
                Instant::now() < deadline,
                "engine {name} did not start listening: {text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // With TLS the base is `https://localhost:…` (the name on the test certificate); the
        // caller brings a client that trusts the certificate, and readiness is the log line.
        let e = Engine {
            child,
            base: if tls {
                format!("https://localhost:{port}")
            } else {
                format!("http://127.0.0.1:{port}")
            },
            control,
        };
        if tls {
            return e;
        }
        let a = agent();
        loop {
            if let Ok(r) = a.get(&format!("{}/readyz", e.base)).call() {
                if r.status() == 200 {
                    return e;
                }
            }
            assert!(
                Instant::now() < deadline,
                "engine {name} did not become ready: {}",
                said()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `rampart serve` with `config` and expects it to refuse to start: its exit code and
    /// stderr.
    pub fn refused(dir: &Path, name: &str, config: &str) -> (i32, String) {
        let port = free_port();
        let cfg = dir.join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\n[decision_log]\ndir = \"{}\"\n{config}",
                dir.join(format!("{name}-log")).display()
            ),
        )
        .unwrap();
        let out = Command::new(bin())
            .args(["serve", "--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// SIGTERM, then waits for the process to exit (the decision log drains first).
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "engine did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// POST /v1/decide; the HTTP status and the answer.
    pub fn decide(&self, body: &Value) -> (u16, Value) {
        post(&format!("{}/v1/decide", self.base), body)
    }

    /// `Authorization` for the bootstrap `admin` user (engines configured without users).
    pub fn admin_auth(&self) -> String {
        use base64ct::Encoding;
        let pw = std::fs::read_to_string(self.control.join("initial-admin-password")).unwrap();
        format!(
            "Basic {}",
            base64ct::Base64::encode_string(format!("admin:{}", pw.trim()).as_bytes())
        )
    }

    /// GET an admin path as the bootstrap admin: the HTTP status and the JSON answer.
    pub fn admin_get(&self, path: &str) -> (u16, Value) {
        let mut r = agent()
            .get(&format!("{}{path}", self.base))
            .header("authorization", self.admin_auth())
            .call()
            .unwrap();
        let st = r.status().as_u16();
        (
            st,
            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap(),
        )
    }

    /// POST JSON to an admin path as the bootstrap admin.
    pub fn admin_post(&self, path: &str, body: &Value) -> (u16, Value) {
        let mut r = agent()
            .post(&format!("{}{path}", self.base))
            .header("authorization", self.admin_auth())
            .send(body.to_string())
            .unwrap();
        let st = r.status().as_u16();
        (
            st,
            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap(),
        )
    }

    pub fn metrics(&self) -> String {
        let mut r = agent()
            .get(&format!("{}/metrics", self.base))
            .call()
            .unwrap();
        r.body_mut().read_to_string().unwrap()
    }

    /// One unlabelled series of `/metrics` (0 when absent).
    pub fn metric(&self, name: &str) -> f64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_string))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

pub fn post(url: &str, body: &Value) -> (u16, Value) {
    let mut r = agent()
        .post(url)
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}")),
    )
}

/// A signed decide request.
pub struct Call<'a> {
    pub app: &'a str,
    pub secret: &'a [u8],
    pub path: &'a str,
    pub body: String,
    pub user: &'a str,
    pub ip: &'a str,
    pub device: &'a str,
    pub nonce: String,
    pub ts_ms: i64,
    /// The decide request's `params` (what rules read with `req.param`).
    pub params: Value,
}

impl Call<'_> {
    pub fn json(&self) -> Value {
        let h = rampart_core::replay::sign::sign(
            self.secret,
            &rampart_core::replay::sign::ToSign {
                app: self.app,
                method: "POST",
                path: self.path,
                query: "",
                body: self.body.as_bytes(),
                timestamp_ms: self.ts_ms,
                nonce: &self.nonce,
            },
        );
        serde_json::json!({
            "app": self.app,
            "request": {
                "method": "POST",
                "path": self.path,
                "headers": {
                    "x-timestamp": h.timestamp,
                    "x-nonce": h.nonce,
                    "x-signature": h.signature,
                    "user-agent": "Mozilla/5.0 (X11; Linux x86_64) integration-test",
                },
                "body": self.body,
            },
            "client": { "ip": self.ip, "device_id": self.device },
            "user_id": self.user,
            "params": self.params,
        })
    }
}

/// A numeric setting from the environment (benches), or its default.
pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A nonce unique to this test run.
pub fn nonce(tag: &str, i: u64) -> String {
    format!(
        "{tag}-{}-{i:08}-{}",
        std::process::id(),
        now_ms() % 1_000_000
    )
}
