//! A minimal HTTP/1.1 client over one keep-alive TCP connection, for `rampart demo` (plain
//! `http://` only). It sends `Content-Length` bodies and reads `Content-Length` or chunked answers
//! — what the engine sends — and reconnects once when the server closed an idle connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct Conn {
    addr: String,
    host: String,
    stream: Option<BufReader<TcpStream>>,
}

/// Splits `http://host:port[/…]` into (`host:port`, host header).
pub fn parse_base(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?}: only http:// URLs are supported"))?;
    let hostport = rest.split('/').next().unwrap_or("");
    if hostport.is_empty() {
        return Err(format!("{url:?}: no host"));
    }
    let addr = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    Ok((addr, hostport.to_string()))
}

impl Conn {
    pub fn new(base: &str) -> Result<Conn, String> {
        let (addr, host) = parse_base(base)?;
        Ok(Conn {
            addr,
            host,
            stream: None,
        })
    }

    fn connect(&mut self) -> std::io::Result<&mut BufReader<TcpStream>> {
        if self.stream.is_none() {
            let s = TcpStream::connect(&self.addr)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.set_write_timeout(Some(Duration::from_secs(10)))?;
            self.stream = Some(BufReader::new(s));
        }
        Ok(self.stream.as_mut().expect("just connected"))
    }

    /// Sends one request; returns the status and the body.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        match self.try_request(method, path, headers, body) {
            Ok(r) => Ok(r),
            Err(_) => {
                // The server may have closed the idle connection: one fresh attempt.
                self.stream = None;
                self.try_request(method, path, headers, body)
            }
        }
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-length: {}\r\n",
            self.host,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(k);
            head.push_str(": ");
            head.push_str(v);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let r = self.connect()?;
        let w = r.get_mut();
        w.write_all(head.as_bytes())?;
        w.write_all(body)?;
        let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(bad("connection closed"));
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("bad status line"))?;
        let (mut len, mut chunked, mut close) = (None, false, false);
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                match k.as_str() {
                    "content-length" => len = v.parse().ok(),
                    "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
                    "connection" => close = v.eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        if chunked {
            loop {
                line.clear();
                r.read_line(&mut line)?;
                let n = usize::from_str_radix(line.trim(), 16).map_err(|_| bad("bad chunk"))?;
                let mut chunk = vec![0; n + 2];
                r.read_exact(&mut chunk)?;
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(n) = len {
            out.resize(n, 0);
            r.read_exact(&mut out)?;
        }
        if close {
            self.stream = None;
        }
        Ok((status, out))
    }
}
