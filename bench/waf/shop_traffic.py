#!/usr/bin/env python3
"""Writes bench/waf/shop-traffic.jsonl: benign traffic of an online shop, in the CRS corpus
format (`id`, `family`, `label: "benign"`, `method`, `uri`, `headers`, `body`), for measuring the
edge WAF's false positives.

It is built independently of rules/samples/benign/ (other phrase banks, routes, headers and
shapes: HTML forms, JSON APIs, GraphQL, multipart uploads, analytics beacons, browser hint
headers, consent and tracking cookies), so that a WAF tuned on one can be judged on the other.
Each record carries `split`: "tune" or "validate" (every other record of each route); tune on
one, report both, never fix a validation case by hand.

    python3 bench/waf/shop_traffic.py [--count 1600]

Deterministic (fixed seed), standard library only.
"""
import argparse
import base64
import json
import os
import random
import string
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
UA_FILE = os.path.join(HERE, "..", "..", "rules", "samples", "benign", "user-agents.txt")
rng = random.Random(20261205)

WORDS = """shoes sneakers running trail boots sandals jacket parka hoodie jeans chinos shorts dress
skirt blouse shirt polo tee cardigan sweater scarf beanie gloves socks backpack tote wallet belt
watch bracelet necklace earrings ring sunglasses laptop tablet phone case charger cable usb-c hub
monitor keyboard mouse headset speaker lamp rug pillow duvet towel mug kettle blender toaster pan
knife cutting board spatula teapot coffee beans grinder filter candle vase frame poster puzzle lego
doll drone camera lens tripod yoga mat dumbbell bike helmet tent stove lantern cooler bottle
shampoo conditioner serum cream lipstick mascara perfume razor toothbrush vitamins protein""".split()
ADJ = """red blue navy black white grey green olive beige pink purple gold silver leather cotton
linen wool silk waterproof wireless organic vegan kids mens womens unisex large small xl 2xl slim
oversized vintage retro classic limited new sale cheap premium handmade""".split()
BRANDS = ["Nike", "Adidas", "Levi's", "H&M", "Zara", "Uniqlo", "Apple", "Samsung", "Sony", "Bose",
          "IKEA", "Dyson", "L'Oréal", "Estée Lauder", "Marks & Spencer", "Ben & Jerry's", "Dr. Martens",
          "Tommy Hilfiger", "Calvin Klein", "Victoria's Secret", "Abercrombie & Fitch", "AT&T",
          "Procter & Gamble", "Johnson & Johnson", "Barnes & Noble", "Crate & Barrel", "P&O",
          "Hershey's", "McDonald's", "Kellogg's", "Muji", "Xiaomi", "Huawei", "Lenovo", "Asus"]
FIRST = ["James", "Mary", "Seán", "Zoë", "Chloé", "Renée", "Jürgen", "François", "Siobhán", "Niamh",
         "D'Arcy", "Jo-Ann", "Mary-Kate", "Anne-Marie", "Nuñez", "Łukasz", "Ólafur", "Aoife", "Björk",
         "Mohammed", "Fatima", "Wei", "Yuki", "Priya", "Olumide", "Keanu", "Ngozi", "Ana", "Mateo"]
LAST = ["O'Brien", "O'Neill", "D'Souza", "McDonald", "MacLeod", "Smith-Jones", "van der Berg",
        "de la Cruz", "Al-Farsi", "Nguyễn", "Müller", "Schröder", "García Márquez", "Kowalski",
        "Dell'Acqua", "N'Diaye", "St. John", "Lee", "Kim", "Wang", "Singh", "Okafor", "Rossi"]
STREETS = ["12 O'Connell St", "Flat 4B, 221 Baker Street", "1600 Amphitheatre Pkwy, Suite #200",
           "Rue de l'Église 5", "Hauptstraße 12a", "Calle 23 #45-67", "PO Box 1234",
           "Unit 7/15 George St", "3-chōme-2-1 Shibuya", "Apt. 5 (rear entrance), 88 Main St.",
           "c/o Reception, 1 Canada Square", "Building 3; Floor 2; Room 210", "Via dell'Orso 8"]
CITIES = ["Dublin", "London", "Paris", "Berlin", "São Paulo", "Zürich", "Kraków", "Tokyo", "Lagos",
          "Mumbai", "Toronto", "Coeur d'Alene", "Winston-Salem", "Saint-Étienne", "Köln"]
REVIEW_BITS = [
    "Great quality, fits true to size!", "I'd definitely select this again.", "Not bad for the price :)",
    "Arrived in 2 days -- well packed.", "Colour is more 'navy' than 'blue' IMO.",
    "5/5 would buy again!!!", "Runs small; order one size up.", "The strap broke after 3 weeks :(",
    "Perfect for my daughter's birthday <3", "Works with my iPhone 15 & iPad (USB-C).",
    "Don't bother -- it's cheap plastic.", "Love it; my wife loves it too.", "10/10, no complaints.",
    "It's \"waterproof\" until it rains.", "Bought 2 (one for me & one for my mum).",
    "Exactly as described. Seller was helpful.", "Battery lasts ~8 hrs with ANC on.",
    "Sizing chart says M = 38-40\" chest.", "Price drop after I ordered... -$10 :/",
    "Made in the E.U. (Portugal) — nice stitching.", "Smells like vanilla + sandalwood.",
    "Customer service said 'no refunds' on sale items?", "Delivered to the wrong door (#12 vs #21).",
    "I've washed it 10x at 40°C, still fine.", "The union of style and comfort!",
    "Please add a 'drop-down' size selector.", "Select the 'gift wrap' option, it's worth it.",
    "Order #A-10293 arrived damaged; replaced within a week.", "Half the price of the one in store.",
    "C'est parfait, merci !", "Sehr gut, würde ich wieder kaufen.", "Muy buena calidad, llegó rápido.",
    "とても良いです。また買います。", "非常好，物流很快。", "Ótimo produto, recomendo!",
    "Bardzo dobra jakość.", "Отличное качество, спасибо!", "ممتاز جدا", "Çok güzel, teşekkürler.",
    "Tried it for a week: 7/10. Pros: light, warm. Cons: zip is stiff.",
    "My order (2 items) came in one box; the 2nd item was missing.",
    "Can I return it if I've removed the tags?", "Where's my order? It's been 5 days.",
    "Is the 50% off code SAVE50 still valid?", "email me at jo.ann+shop@example.org please",
    "See https://shop.example.com/help/returns?lang=en for the policy",
    "Tel: +44 (0)20 7946 0958, ext. 12", "Deliver between 9am-5pm, Mon-Fri only.",
    "The 'select all' button doesn't work on mobile.", "Bought it on sale for €19.99 (was €39.99).",
    "It's 100% cotton; shrinks a bit (~5%).", "Gift for my dad's 70th -- he loved it!",
    "Use code WELCOME10 at checkout; it worked for me.", "Fits a 15.6\" laptop + charger.",
    "2+2 deal: buy 2, get 2 free? Confused...", "I'm 5'10\" and the M fits well.",
]
QUERIES = ["levi's 501", "men's shoes size 10.5", "ben & jerry's", "phone case for iphone 15 pro",
           "usb-c hub 4k@60hz", "50% off", "gift under $20", "kids' jacket 3-4 years", "c++ book",
           "rock 'n' roll vinyl", "t-shirt xl", "o'neill wetsuit", "\"noise cancelling\" headphones",
           "select your size", "drop-off points", "union jack", "tom & jerry", "ac/dc t-shirt",
           "m&m's", "1/2 price", "3-in-1 charger", "wi-fi extender", "#ootd dress", "<3 mug",
           "gold chain 18\"", "16:9 monitor", "100% wool scarf", "rug 5x8", "size: 38", "what's new",
           "where is my order?", "café au lait mug", "crème brûlée torch", "größe 42", "zapatos niña",
           "水筒", "保温杯", "コーヒー", "ночник", "عطر", "cheap & good", "on sale now!", "new in (women)"]
COUPONS = ["WELCOME10", "SAVE-50", "BF2026", "free_ship", "SPRING26", "VIP-GOLD-2026", "xmas2026",
           "STUDENT15", "DOUBLE11", "618HAPPY", "5OFF50", "THANKYOU", "EID-MUBARAK", "FRÜHLING"]
PASSWORDS_CHARS = string.ascii_letters + string.digits + "!@#$%^&*()-_=+[]{};:,.<>/?~"


def uas():
    with open(UA_FILE, encoding="utf-8") as f:
        lines = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    return [l for l in lines if "Mozilla" in l or "Dalvik" in l] or lines


UAS = uas()


def pick(xs):
    return rng.choice(xs)


def name():
    return f"{pick(FIRST)} {pick(LAST)}"


def email(n):
    local = "".join(c for c in n.lower().replace(" ", ".") if c.isascii() and (c.isalnum() or c in "._-"))
    local = local.strip(".") or "user"
    if rng.random() < 0.3:
        local += "+" + pick(["shop", "orders", "news"])
    return f"{local}@{pick(['example.com', 'example.org', 'mail.example.net', 'uni.example.ac.uk'])}"


def password():
    n = rng.randint(8, 20)
    return "".join(pick(PASSWORDS_CHARS) for _ in range(n))


def sku():
    return f"{pick(['SKU', 'P', 'ART'])}-{rng.randint(1000, 99999)}{pick(['', '-BLK', '-XL', '-42'])}"


def review():
    return " ".join(pick(REVIEW_BITS) for _ in range(rng.randint(1, 3)))


def search_text():
    r = rng.random()
    if r < 0.4:
        return pick(QUERIES)
    if r < 0.7:
        return f"{pick(ADJ)} {pick(WORDS)}"
    if r < 0.85:
        return f"{pick(BRANDS)} {pick(WORDS)}"
    return f"{pick(ADJ)} {pick(ADJ)} {pick(WORDS)} {pick(['for men', 'for her', 'under 50', '2026', 'sale'])}"


def ga():
    return f"GA1.2.{rng.randint(10**8, 10**9)}.{rng.randint(1.6e9, 1.8e9)}"


def jwt():
    def b64(d):
        return base64.urlsafe_b64encode(json.dumps(d, separators=(",", ":")).encode()).rstrip(b"=").decode()
    head = b64({"alg": "HS256", "typ": "JWT"})
    body = b64({"sub": str(uuid.UUID(int=rng.getrandbits(128))), "iat": 1764900000, "scope": "shop:read shop:write"})
    sig = base64.urlsafe_b64encode(bytes(rng.getrandbits(8) for _ in range(32))).rstrip(b"=").decode()
    return f"{head}.{body}.{sig}"


def cookies():
    parts = [f"session={uuid.UUID(int=rng.getrandbits(128)).hex}"]
    if rng.random() < 0.7:
        parts.append(f"_ga={ga()}")
    if rng.random() < 0.5:
        parts.append(f"_gid=GA1.2.{rng.randint(10**8, 10**9)}.{rng.randint(1.6e9, 1.8e9)}")
    if rng.random() < 0.4:
        consent = {"necessary": True, "analytics": rng.random() < 0.5, "marketing": False, "ts": 1764900000}
        parts.append("cookie_consent=" + urllib.parse.quote(json.dumps(consent, separators=(",", ":"))))
    if rng.random() < 0.3:
        parts.append(f"cart_id={rng.randint(10**6, 10**7)}")
    if rng.random() < 0.2:
        parts.append(f"_fbp=fb.1.{rng.randint(1.6e12, 1.8e12)}.{rng.randint(10**8, 10**9)}")
    if rng.random() < 0.2:
        parts.append("lang=" + pick(["en-GB", "fr-FR", "de", "ja", "pt-BR"]))
    if rng.random() < 0.15:
        parts.append("recently_viewed=" + urllib.parse.quote(",".join(sku() for _ in range(3))))
    return "; ".join(parts)


def headers(kind, ua=None):
    ua = ua or pick(UAS)
    h = {"host": "shop.example.com", "user-agent": ua}
    if kind == "html":
        h["accept"] = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
    elif kind == "json":
        h["accept"] = "application/json, text/plain, */*"
    else:
        h["accept"] = "*/*"
    h["accept-language"] = pick(["en-US,en;q=0.9", "en-GB,en;q=0.8", "fr-FR,fr;q=0.9,en;q=0.6",
                                 "de-DE,de;q=0.9", "ja,en-US;q=0.7", "pt-BR,pt;q=0.9,en;q=0.5", "zh-CN,zh;q=0.9"])
    h["accept-encoding"] = pick(["gzip, deflate, br", "gzip, deflate, br, zstd", "gzip"])
    if rng.random() < 0.85:
        h["cookie"] = cookies()
    if "Chrome" in ua and rng.random() < 0.7:
        h["sec-ch-ua"] = '"Chromium";v="130", "Google Chrome";v="130", "Not?A_Brand";v="99"'
        h["sec-ch-ua-mobile"] = pick(["?0", "?1"])
        h["sec-ch-ua-platform"] = pick(['"Windows"', '"macOS"', '"Android"', '"Linux"'])
        h["sec-fetch-site"] = pick(["same-origin", "same-site", "none", "cross-site"])
        h["sec-fetch-mode"] = pick(["cors", "navigate", "no-cors"])
        h["sec-fetch-dest"] = pick(["empty", "document", "image"])
    if rng.random() < 0.6:
        h["referer"] = pick([
            "https://shop.example.com/",
            f"https://shop.example.com/search?q={urllib.parse.quote_plus(search_text())}",
            f"https://www.google.com/",
            f"https://shop.example.com/p/{sku()}?utm_source=newsletter&utm_medium=email&utm_campaign=bf_2026",
            "https://l.facebook.com/l.php?u=https%3A%2F%2Fshop.example.com%2F&h=AT0x",
        ])
    if kind == "json" and rng.random() < 0.3:
        h["authorization"] = "Bearer " + jwt()
    if rng.random() < 0.2:
        h["x-requested-with"] = "XMLHttpRequest"
    if rng.random() < 0.1:
        h["dnt"] = "1"
    return h


def q(params):
    return urllib.parse.urlencode(params, quote_via=urllib.parse.quote_plus)


def jdump(x):
    return json.dumps(x, ensure_ascii=rng.random() < 0.5, separators=(",", ":") if rng.random() < 0.5 else None)


def r_search():
    p = {"q": search_text()}
    for k, vals in [("sort", ["price_asc", "price_desc", "newest", "relevance", "rating:desc"]),
                    ("page", [str(i) for i in range(1, 9)]), ("size", ["24", "48"]),
                    ("category", ["women/shoes", "men > jackets", "home & garden", "kids"]),
                    ("price", ["0-50", "50-100", "100+", "[10 TO 20]"]), ("color", ADJ[:10]),
                    ("utm_source", ["google", "newsletter", "instagram"]), ("gclid", ["Cj0KCQiA" + "x" * 20])]:
        if rng.random() < 0.35:
            p[k] = pick(vals)
    path = pick(["/search", "/api/products", "/api/v2/search", "/s"])
    return "GET", f"{path}?{q(p)}", headers("html" if path in ("/search", "/s") else "json"), ""


def r_product():
    extra = ""
    if rng.random() < 0.5:
        extra = "?" + q({k: v for k, v in [("variant", rng.randint(1, 40)), ("ref", pick(["home", "search", "email"])),
                                          ("utm_campaign", pick(["spring_sale", "bf-2026", "new in"]))] if rng.random() < 0.6})
    slug = f"{pick(ADJ)}-{pick(WORDS)}".replace(" ", "-")
    return "GET", f"/p/{slug}/{sku()}{extra}".rstrip("?"), headers("html"), ""


def r_cart():
    item = {"sku": sku(), "qty": rng.randint(1, 5)}
    if rng.random() < 0.5:
        item["options"] = {"size": pick(["S", "M", "L", "XL", "42", "10.5", "3-4Y"]), "colour": pick(ADJ)}
    if rng.random() < 0.2:
        item["engraving"] = pick(["J & K forever", "Love, Mum x", "#1 Dad", "To: Zoë <3", "Est. 2026", "Don't panic!"])
    if rng.random() < 0.2:
        item["gift_message"] = review()
    h = headers("json")
    h["content-type"] = "application/json"
    return "POST", pick(["/api/cart", "/api/cart/items"]), h, jdump(item)


def address():
    return {"name": name(), "line1": pick(STREETS), "city": pick(CITIES),
            "postcode": pick(["D02 X285", "SW1A 1AA", "75001", "10115", "01310-100", "8001", "100-0001", "M5V 2T6"]),
            "country": pick(["IE", "GB", "FR", "DE", "BR", "CH", "JP", "CA", "US"]),
            "phone": pick(["+353 1 555 0142", "+44 (0)20 7946 0958", "(555) 010-4477", "+81-3-5555-0100"])}


def r_order():
    body = {"items": [{"sku": sku(), "qty": rng.randint(1, 3), "price": round(rng.uniform(3, 300), 2)} for _ in range(rng.randint(1, 4))],
            "shipping": address(), "currency": pick(["EUR", "USD", "GBP", "JPY", "BRL"])}
    if rng.random() < 0.5:
        body["note"] = pick(["Leave with neighbour at #12", "Ring twice; dog is friendly", "No invoice in the box (gift)",
                             "Deliver after 6pm -- thanks!", "Call +44 7700 900123 on arrival", "Fragile: glass (handle with care)",
                             "Back door, code 1234#", review()])
    if rng.random() < 0.3:
        body["coupon"] = pick(COUPONS)
    h = headers("json")
    h["content-type"] = "application/json; charset=utf-8"
    return "POST", pick(["/api/orders", "/api/checkout"]), h, jdump(body)


def r_pay():
    body = {"order_id": str(uuid.UUID(int=rng.getrandbits(128))), "amount": round(rng.uniform(5, 900), 2),
            "method": pick(["card", "paypal", "apple_pay", "klarna", "pix", "ideal"]),
            "token": pick(["tok_", "pm_", "src_"]) + "".join(pick(string.ascii_letters + string.digits) for _ in range(24)),
            "return_url": f"https://shop.example.com/checkout/complete?order={rng.randint(10**5, 10**6)}&step=3"}
    h = headers("json")
    h["content-type"] = "application/json"
    return "POST", "/api/order/pay", h, jdump(body)


def r_login():
    user = email(name()) if rng.random() < 0.7 else pick(["jo_ann", "d.arcy", "mk-olsen", "sean.obrien", "zoe99"])
    body = q({"username": user, "password": password(), "remember": pick(["on", "1"]), "csrf_token": uuid.uuid4().hex})
    h = headers("html")
    h["content-type"] = "application/x-www-form-urlencoded"
    h["origin"] = "https://shop.example.com"
    return "POST", pick(["/login", "/account/login", "/api/login"]), h, body


def r_register():
    n = name()
    body = {"name": n, "email": email(n), "password": password(), "marketing": rng.random() < 0.5,
            "address": address() if rng.random() < 0.5 else None}
    h = headers("json")
    h["content-type"] = "application/json"
    return "POST", "/api/account/register", h, jdump(body)


def r_review():
    body = {"sku": sku(), "rating": rng.randint(1, 5), "title": pick(REVIEW_BITS), "text": review(),
            "author": name() if rng.random() < 0.6 else pick(["Anonymous", "A verified buyer", "J.D."])}
    if rng.random() < 0.5:
        h = headers("json")
        h["content-type"] = "application/json"
        return "POST", "/api/reviews", h, jdump(body)
    h = headers("html")
    h["content-type"] = "application/x-www-form-urlencoded"
    return "POST", "/reviews/new", h, q({k: str(v) for k, v in body.items()})


def r_support():
    msg = " ".join([review(), pick(["Order ref: #", "Tracking no. ", "Invoice "]) + str(rng.randint(10**6, 10**7)), review()])
    body = {"subject": pick(["Where's my order?", "Return / exchange", "Coupon not working", "Charged twice?!",
                             "Wrong size (M instead of L)", "Question about delivery (urgent)", "Change my e-mail"]),
            "message": msg, "email": email(name())}
    h = headers("json")
    h["content-type"] = "application/json"
    return "POST", "/api/support/tickets", h, jdump(body)


def r_coupon():
    body = {"code": pick(COUPONS) if rng.random() < 0.8 else " " + pick(COUPONS).lower() + " ", "cart_total": round(rng.uniform(10, 400), 2)}
    h = headers("json")
    h["content-type"] = "application/json"
    return "POST", pick(["/api/coupons/claim", "/api/coupon/apply"]), h, jdump(body)


def r_graphql():
    query = pick([
        "query Product($id: ID!) { product(id: $id) { id title price { amount currency } images(first: 4) { url alt } } }",
        "query Search($q: String!, $first: Int = 24) { search(query: $q, first: $first) { edges { node { id title } } } }",
        "mutation AddToCart($sku: String!, $qty: Int!) { cartAdd(sku: $sku, qty: $qty) { id total } }",
        "{ me { id email orders(last: 5) { id status total } } }",
    ])
    body = {"query": query, "variables": {"id": sku(), "q": search_text(), "sku": sku(), "qty": rng.randint(1, 3)}, "operationName": None}
    h = headers("json")
    h["content-type"] = "application/json"
    return "POST", "/graphql", h, jdump(body)


def r_beacon():
    ev = {"event": pick(["page_view", "add_to_cart", "view_item", "begin_checkout", "scroll"]),
          "page": f"/p/{pick(WORDS)}/{sku()}", "title": f"{pick(BRANDS)} {pick(ADJ)} {pick(WORDS)} | Shop",
          "ts": 1764900000000 + rng.randint(0, 10**7), "screen": pick(["1920x1080", "390x844", "1440x900"]),
          "referrer": pick(["", "https://www.google.com/", "android-app://com.google.android.gm/"])}
    h = headers("any")
    h["content-type"] = pick(["text/plain;charset=UTF-8", "application/json"])
    return "POST", pick(["/collect", "/api/events", "/t"]), h, json.dumps(ev)


def r_static():
    path = pick([f"/static/js/app.{uuid.uuid4().hex[:8]}.js", f"/static/css/main.{uuid.uuid4().hex[:8]}.css",
                 f"/images/products/{sku().lower()}_800x800.webp", "/favicon.ico", "/robots.txt",
                 f"/fonts/inter-var.woff2?v={rng.randint(1, 9)}", "/manifest.webmanifest", "/sitemap.xml"])
    return "GET", path, headers("any"), ""


def r_account():
    path = pick(["/account", "/account/orders?page=2&status=shipped", "/account/addresses", "/api/me",
                 f"/api/orders/{uuid.UUID(int=rng.getrandbits(128))}", "/account/wishlist?sort=added_desc",
                 "/api/orders?status=delivered&from=2026-01-01&to=2026-12-31", "/account/settings#security"])
    return "GET", path.split("#")[0], headers("json"), ""


def r_upload():
    boundary = "----WebKitFormBoundary" + "".join(pick(string.ascii_letters + string.digits) for _ in range(16))
    fname = pick(["IMG_2041.jpg", "receipt (1).pdf", "photo-of-damage.png", "Screenshot 2026-11-30 at 10.12.44.png", "invoice_#4411.pdf"])
    text = review()
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"order\"\r\n\r\n{rng.randint(10**5, 10**6)}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"comment\"\r\n\r\n{text}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{fname}\"\r\n"
            f"Content-Type: {pick(['image/jpeg', 'image/png', 'application/pdf'])}\r\n\r\n"
            f"{''.join(pick(string.ascii_letters) for _ in range(40))}\r\n--{boundary}--\r\n")
    h = headers("html")
    h["content-type"] = f"multipart/form-data; boundary={boundary}"
    return "POST", "/api/returns/upload", h, body


ROUTES = [(r_search, 18), (r_product, 10), (r_cart, 8), (r_order, 7), (r_pay, 5), (r_login, 6),
          (r_register, 3), (r_review, 8), (r_support, 5), (r_coupon, 5), (r_graphql, 5), (r_beacon, 5),
          (r_static, 6), (r_account, 6), (r_upload, 3)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1600)
    ap.add_argument("--out", default=os.path.join(HERE, "shop-traffic.jsonl"))
    a = ap.parse_args()
    total = sum(w for _, w in ROUTES)
    seen = {}
    with open(a.out, "w", encoding="utf-8") as f:
        for i in range(a.count):
            x = rng.uniform(0, total)
            for fn, w in ROUTES:
                x -= w
                if x <= 0:
                    break
            method, uri, hdrs, body = fn()
            route = fn.__name__[2:]
            n = seen.get(route, 0)
            seen[route] = n + 1
            rec = {"id": f"shop-{route}-{n + 1}", "family": route, "label": "benign", "paranoia": 1,
                   "split": "tune" if n % 2 == 0 else "validate", "method": method, "uri": uri,
                   "headers": hdrs, "body": body, "desc": f"benign {route} request"}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
