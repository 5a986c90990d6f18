//! The Lua scripts of the Redis stores. Each check-and-set is one script, so it is atomic on the
//! node that holds its keys (multi-key scripts keep their keys in one slot with a hash tag).
//! redis-rs sends them with `EVALSHA` and loads them again on `NOSCRIPT` (after a restart or a
//! `SCRIPT FLUSH`). Arithmetic stays below 2^53, where Lua's numbers are exact.

use std::sync::LazyLock;

use redis::Script;

/// Exact nonces and duplicate-submission fingerprints: one key per entry, set if absent.
///
/// KEYS[1]; ARGV[1] the call's token (unique to this call of this instance), ARGV[2] the TTL
/// (ms). Returns 0 for "new" and 1 for "seen". The token is the key's value, so a second run of
/// the same call (sent again after its first answer never came) meets its own write and answers
/// "new" again: the write is idempotent, and a slow first answer is never judged a replay.
pub static SET_ONCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end
return 1
"#,
    )
});

/// The compact mode's probe, shared by [`NONCE_BLOOM`] and [`ANTI_REPLAY_LIMITS`]: a blocked Bloom
/// filter (see `BloomLayout`), so all the probe bits of a nonce lie in one 128-byte block of its
/// slice-shard bitmap, read with one `GETRANGE` and written back with one `SETRANGE`. The probes
/// come as one binary argument, a (byte index in the block, bit value) pair per probe bit, and are
/// tested and set with Lua arithmetic (no function call per probe). Arguments and calls into C are
/// most of what a script costs Redis: the standard layout's 20 probes, as one `BITFIELD`, were 80
/// arguments.
///
/// `bloom(bitmap, token key, bitmap TTL, bitmap size, token TTL, block offset, probes)` returns
/// (seen, rerun). The token key is set first (`SET NX`): if it was already there, this is a
/// second run of the same call (sent again after its first answer never came) and answers "new"
/// again instead of meeting its own bits; a "seen" answer deletes it. A missing bitmap is
/// created at its full size with its expiry, so it never grows by doubling and never outlives
/// its slice. `@B` stands for the block's size in bytes.
const BLOOM_LUA: &str = r#"
local function bloom(key, tok, ttl, size, ttok, off, probes)
  if not redis.call('SET', tok, 1, 'NX', 'PX', ttok) then return 0, true end
  local blk = redis.call('GETRANGE', key, off, tonumber(off) + @B - 1)
  if #blk == 0 then
    redis.call('SET', key, string.rep('\0', tonumber(size)), 'PX', ttl)
  end
  local b = {string.byte(blk, 1, @B)}
  for i = #b + 1, @B do b[i] = 0 end
  local p = {string.byte(probes, 1, -1)}
  local new = false
  for j = 1, #p, 2 do
    local i, m = p[j] + 1, p[j + 1]
    local v = b[i]
    if v % (m + m) < m then
      b[i] = v + m
      new = true
    end
  end
  if not new then
    redis.call('DEL', tok)
    return 1, false
  end
  redis.call('SETRANGE', key, off, string.char(unpack(b)))
  return 0, false
end
"#;

fn bloom_lua() -> String {
    BLOOM_LUA.replace("@B", &(super::stores::BLOCK_BITS / 8).to_string())
}

/// Compact nonce mode: one time slice of one shard of one app's Bloom filter is one string key.
///
/// KEYS[1] the slice-shard bitmap; KEYS[2] this call's token key (same slot); ARGV[1] the
/// bitmap's TTL (ms); ARGV[2] its size (bytes); ARGV[3] the token key's TTL (ms); ARGV[4] the
/// nonce's block (byte offset); ARGV[5] its probes (see [`BLOOM_LUA`]). A "new" answer leaves
/// the token key behind for 2 × the call timeout + 100 ms.
/// Returns 1 for "seen" (a replay), 0 for "new".
pub static NONCE_BLOOM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        &[
            &bloom_lua(),
            r#"
local seen = bloom(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return seen
"#,
        ]
        .concat(),
    )
});

/// The anti-replay step and the rule tiers' planned counting calls in one script (one node):
/// the nonce (exact or Bloom), then the fingerprint if one is asked, and only when the request
/// is fresh and new, the planned rate limits and distinct counts in order, stopping after the
/// first refusal — the calls the rules would make themselves, in the same order (see
/// `RuleSet::plan_calls`).
/// With no limit it is the nonce-then-fingerprint step alone (the anti-replay core's two writes
/// in one round trip). The nonce and the fingerprint hold the call's token, so a second run of
/// the same call answers as the first did (see [`SET_ONCE`]).
///
/// KEYS[1] the nonce key (exact) or bitmap (Bloom), KEYS[2] the call's token key (Bloom; the
/// nonce key again when exact), KEYS[3] the fingerprint (the nonce key again when none is asked),
/// KEYS[4..] the planned calls' keys (one per limit; a distinct count's current and previous
/// windows). ARGV[1] `e` (exact) or `b` (Bloom), ARGV[2] the call's token, ARGV[3] the nonce's TTL
/// (exact) or the bitmap's (Bloom), ARGV[4] the bitmap's size, ARGV[5] the token key's TTL,
/// ARGV[6] the fingerprint's TTL (0: none asked), ARGV[7] now (ms), ARGV[8] the number of planned
/// calls n, then three arguments per call: `g`, T and τ (a limit, as [`GCRA`]), or `d`, the item
/// and the current window's TTL (a distinct count, as [`DISTINCT`]); then (Bloom) the nonce's
/// block offset and its probes (see [`BLOOM_LUA`]).
///
/// Returns {nonce seen (0|1), fingerprint seen (0|1, or -1 when not asked or not touched), then
/// for each call made: allowed (1|0) and retry_after_ms (a limit), or 1 and the count (a
/// distinct count)}. A second run of the same call (sent
/// again after its first answer never came) meets its own writes, answers "new" as the first
/// did, and takes no limit: the first run may have taken them, and the rules then ask on their
/// own (a limit is spent twice only in that case, never a nonce judged twice).
pub static ANTI_REPLAY_LIMITS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        &[
            &bloom_lua(),
            r#"
local token = ARGV[2]
local n = tonumber(ARGV[8])
local rerun = false
local function once(key, ttl)
  if redis.call('SET', key, token, 'NX', 'PX', ttl) then return 0 end
  if redis.call('GET', key) == token then rerun = true return 0 end
  return 1
end
local seen = 1
if ARGV[1] == 'e' then
  seen = once(KEYS[1], ARGV[3])
else
  seen, rerun = bloom(KEYS[1], KEYS[2], ARGV[3], ARGV[4], ARGV[5], ARGV[9 + 3 * n], ARGV[10 + 3 * n])
end
if seen == 1 then return {1, -1} end
local fp = -1
if tonumber(ARGV[6]) > 0 then
  fp = once(KEYS[3], ARGV[6])
  if fp == 1 then return {0, 1} end
end
local out = {0, fp}
if rerun then return out end
local now = tonumber(ARGV[7])
local ki = 4
for i = 1, n do
  local a = 6 + 3 * i
  if ARGV[a] == 'd' then
    -- A key PFADD left unchanged already has its window's expiry.
    if redis.call('PFADD', KEYS[ki], ARGV[a + 1]) == 1 then
      redis.call('PEXPIRE', KEYS[ki], ARGV[a + 2])
    end
    out[#out + 1] = 1
    -- A union (two keys) makes Redis merge both into 16 KiB of registers and count those; one
    -- key is counted from its own representation (sparse, or its cached count).
    if redis.call('EXISTS', KEYS[ki + 1]) == 1 then
      out[#out + 1] = redis.call('PFCOUNT', KEYS[ki], KEYS[ki + 1])
    else
      out[#out + 1] = redis.call('PFCOUNT', KEYS[ki])
    end
    ki = ki + 2
  else
    local t = tonumber(ARGV[a + 1])
    local tau = tonumber(ARGV[a + 2])
    local k = KEYS[ki]
    ki = ki + 1
    local tat = tonumber(redis.call('GET', k) or '') or now
    if tat < now then tat = now end
    local nxt = tat + t
    if nxt - now <= tau then
      redis.call('SET', k, string.format('%.3f', nxt), 'PX', math.ceil(nxt - now) + 1)
      out[#out + 1] = 1
      out[#out + 1] = 0
    else
      local retry = math.ceil(nxt - tau - now)
      if retry < 1 then retry = 1 end
      out[#out + 1] = 0
      out[#out + 1] = retry
      return out
    end
  end
end
return out
"#,
        ]
        .concat(),
    )
});

/// GCRA (generic cell rate algorithm), one key holding the theoretical arrival time (ms).
///
/// KEYS[1]; ARGV: now (ms), emission interval T (ms), tolerance τ = T·burst (ms).
/// Returns {allowed (1|0), retry_after_ms}.
pub static GCRA: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local now = tonumber(ARGV[1])
local t = tonumber(ARGV[2])
local tau = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '') or now
if tat < now then tat = now end
local nxt = tat + t
if nxt - now <= tau then
  redis.call('SET', KEYS[1], string.format('%.3f', nxt), 'PX', math.ceil(nxt - now) + 1)
  return {1, 0}
end
local retry = math.ceil(nxt - tau - now)
if retry < 1 then retry = 1 end
return {0, retry}
"#,
    )
});

/// Sliding-window counter: a hash with the current fixed window's start `s`, its width `w`, its
/// count `c` and the previous window's count `p`; the answer weighs `p` by the part of the previous
/// window still inside the sliding one (the same arithmetic as the in-process limiter).
///
/// KEYS[1]; ARGV: now (ms), window (ms), n (0 = read only, nothing is created), and optionally a
/// channel on which the new state is published (`<key>\n<s> <w> <c> <p>`: reputation, which every
/// instance keeps a copy of, see `mirror.rs`). The stores send only additions here: a read is a
/// plain `HMGET` of the four fields, computed by the engine with
/// `rampart_core::store::limits::window_estimate` (no script for what changes nothing).
pub static WINDOW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local now = tonumber(ARGV[1])
local win = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local aligned = now - (now % win)
local v = redis.call('HMGET', KEYS[1], 's', 'w', 'c', 'p')
local s, w = tonumber(v[1]), tonumber(v[2])
local c, p = tonumber(v[3]) or 0, tonumber(v[4]) or 0
if s == nil or w ~= win or now >= s + 2 * win then
  if n == 0 then return 0 end
  s, c, p = aligned, 0, 0
end
if aligned > s then
  if aligned - s == win then p = c else p = 0 end
  c = 0
  s = aligned
end
if n ~= 0 then
  c = c + n
  redis.call('HSET', KEYS[1], 's', s, 'w', win, 'c', c, 'p', p)
  redis.call('PEXPIRE', KEYS[1], s + 2 * win - now + 1)
  if ARGV[4] then
    redis.call('PUBLISH', ARGV[4], KEYS[1] .. '\n' .. string.format('%d %d %d %d', s, win, c, p))
  end
end
local elapsed = (now - s) / win
return math.floor(p * (1 - elapsed) + 0.5) + c
"#,
    )
});

/// Distinct counts: Redis's own HyperLogLog per fixed window; the answer is the union of the
/// current and the previous window. KEYS[1] current, KEYS[2] previous (same slot); ARGV[1] the item
/// ('' = count only), ARGV[2] the current key's TTL (ms): the same deadline (the end of the next
/// window) whenever it is computed, so it is set only when `PFADD` changed the key (a new key
/// among them); an unchanged key already has it. Without a previous window the count is the
/// current key's alone: `PFCOUNT` of two keys first merges them into 16 KiB of registers (11% of
/// the decision's script in an isolated replay, see the README's performance section).
pub static DISTINCT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if ARGV[1] ~= '' and redis.call('PFADD', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.call('PFCOUNT', KEYS[1], KEYS[2])
end
return redis.call('PFCOUNT', KEYS[1])
"#,
    )
});

/// One claim on a pool's refill segment (see `RedisQuotas`): as [`CLAIM`], with the share read
/// from the segment's own stock counter, which only refills raise.
///
/// KEYS[1] holders, KEYS[2] granted, KEYS[3] stock, same slot; ARGV: user, TTL (ms), peek.
pub static CLAIM_REFILL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return {1, 0} end
local share = tonumber(redis.call('GET', KEYS[3]) or '0')
local n = tonumber(redis.call('GET', KEYS[2]) or '0')
if n >= share then return {2, 0} end
if ARGV[3] == '1' then return {0, share - n} end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return {0, share - n - 1}
"#,
    )
});

/// An operator's refill of a pool: adds to its refill segment's stock (and keeps the segment as
/// long as a claim would). KEYS as [`CLAIM_REFILL`]; ARGV: how many, TTL (ms). Returns the
/// refilled stock.
pub static REFILL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local v = redis.call('INCRBY', KEYS[3], ARGV[1])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return v
"#,
    )
});

/// One claim on one stock segment: once per user (a set of holders), never more than the
/// segment's share (a counter), in one atomic step.
///
/// KEYS[1] holders (set), KEYS[2] granted (counter), same slot; ARGV: user, share, TTL (ms),
/// peek (1 = only look). Returns {status, remaining}: 0 granted (or would be), 1 duplicate,
/// 2 exhausted.
pub static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return {1, 0} end
local n = tonumber(redis.call('GET', KEYS[2]) or '0')
local share = tonumber(ARGV[2])
if n >= share then return {2, 0} end
if ARGV[4] == '1' then return {0, share - n} end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {0, share - n - 1}
"#,
    )
});
