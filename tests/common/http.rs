//! A raw HTTP request for the tests whose server may die in the middle of answering (the serve
//! crash tests): no client library, whatever bytes came back before the connection closed.

use std::io::{Read, Write};
use std::time::Duration;

/// POSTs `body` to `addr` + `path` with `headers` and returns every byte the server sent before it
/// closed the connection (empty when it died before answering). `Err` when the connection could
/// not be made or the request's head not written: a test that needs the server up says so with
/// `expect`, one racing the server's death takes it as "nothing was answered".
pub fn post_raw(
    addr: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<Vec<u8>> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    Ok(raw)
}
