//! Admin users for the tests that configure some (not part of `support`, which the pipeline's
//! tests include without the server's crate).

/// `[[admin.users]]` entries for (name, role) pairs; each password is the name + `-pw`.
pub fn admin_users(users: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (name, role) in users {
        let h = rampart::auth::hash_password(&format!("{name}-pw")).unwrap();
        s.push_str(&format!(
            "[[admin.users]]\nname = \"{name}\"\nrole = \"{role}\"\npassword_hash = \"{h}\"\n"
        ));
    }
    s
}

/// `Authorization` for a user of [`admin_users`].
pub fn basic(user: &str) -> String {
    use base64ct::Encoding;
    format!(
        "Basic {}",
        base64ct::Base64::encode_string(format!("{user}:{user}-pw").as_bytes())
    )
}
