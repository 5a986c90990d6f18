#!/usr/bin/env python3
"""Generate the benign request samples under rules/samples/benign/.

Hand-authored synthetic traffic for the "shop" app: every sample is a request a real end user
could send, judged by the default rule set, and expected to be allowed. The content (queries,
reviews, notes, names, addresses, passwords, ...) comes from the lists below; the generator
combines them with personas (name, address, phone, e-mail, country, ISP, IP, language) and
browser user agents read from the shared corpus.

Deterministic: fixed seed, standard library only, sorted output. Re-running rewrites every
*.json file in the category directories (and removes stale ones there).

    python3 rules/samples/benign/generate.py [--user-agents PATH] [--scanner-agents PATH]
"""

import argparse
import base64
import ipaddress
import json
import os
import re
import sys
import unicodedata
import urllib.parse
import uuid

import random

SEED = 20260301
HERE = os.path.dirname(os.path.abspath(__file__))
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_UA = os.path.join(HERE, "user-agents.txt")
DEFAULT_SCANNER_UA = os.path.join(HERE, "..", "..", "lists", "scanner-user-agents.txt")
BASE_TS = 1772323200  # 2026-03-01T00:00:00Z, only used inside opaque tokens

CATEGORIES = [
    "search", "product", "cart", "order", "payment", "coupon", "lottery",
    "login", "review", "profile", "flash-sale", "support", "account",
]

# Addresses that must never appear as a client IP (private, loopback, documentation).
FORBIDDEN_NETS = [ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8",
    "203.0.113.0/24", "198.51.100.0/24", "192.0.2.0/24", "100.64.0.0/10",
    "169.254.0.0/16", "0.0.0.0/8", "224.0.0.0/3", "2001:db8::/32", "fc00::/7",
    "fe80::/10", "::/8",
)]

# --------------------------------------------------------------------------------------------
# Locales: country, Accept-Language, currency, names (display, ascii), addresses, phones,
# mail domains, networks (ISP, IPv4 prefixes, IPv6 prefixes).
# Address tuple: (line1, line2, city, region, postal_code, city in English for descriptions).
# '{n}' in an address is a house/flat number; '#' in a phone template is a digit.
# --------------------------------------------------------------------------------------------

LOCALES = [
    dict(
        country="US", lang="en-US,en;q=0.9", currency="USD",
        names=["Emily Johnson", "Marcus O'Connor", "Jasmine Nguyen", "Tyler Martinez",
               "DeShawn Williams", "Megan D'Angelo", "Carlos Ramírez", "Hannah Smith-Jones",
               "Brian McAllister", "Zoë Patel", "Jack Kim", "Olivia Washington"],
        addresses=[("{n} Maple Ave", "", "Brooklyn", "NY", "11215", "Brooklyn"),
                   ("{n} Main St #4B", "", "Austin", "TX", "78704", "Austin"),
                   ("{n} W 34th St", "Apt 12C", "New York", "NY", "10001", "New York"),
                   ("{n} Lakeshore Dr.", "Unit 5; buzz #12", "Chicago", "IL", "60611", "Chicago"),
                   ("{n} Mission St", "Suite 300 (c/o Acme & Sons)", "San Francisco", "CA", "94105", "San Francisco"),
                   ("{n} Peachtree Rd NE", "", "Atlanta", "GA", "30309", "Atlanta")],
        phones=["+1 (415) 555-01##", "+1 212-555-01##", "(512) 555-01##", "+1 312 555 01##"],
        mail=["gmail.com", "yahoo.com", "icloud.com", "outlook.com", "aol.com"],
        nets=[("Comcast Cable", ["73.0.0.0/8", "98.192.0.0/11"], ["2601:40::/28"]),
              ("Verizon Fios", ["108.4.0.0/14", "71.160.0.0/12"], []),
              ("AT&T Internet", ["99.0.0.0/11", "107.192.0.0/12"], ["2600:1700::/28"]),
              ("T-Mobile USA", ["172.58.0.0/15"], ["2607:fb90::/32"]),
              ("Charter Spectrum", ["66.65.0.0/16", "174.96.0.0/12"], [])],
    ),
    dict(
        country="GB", lang="en-GB,en;q=0.9", currency="GBP",
        names=["Oliver Thompson", "Amelia Davies", "Harry Fitzgerald-Hughes", "Isla MacLeod",
               "George Evans", "Poppy Wright", "Priya Chaudhary", "Callum O'Neill"],
        addresses=[("Flat 2/1, {n} O'Neill Street", "", "Glasgow", "Scotland", "G12 8QQ", "Glasgow"),
                   ("{n} Baker Street", "Flat C", "London", "", "NW1 6XE", "London"),
                   ("{n} St Mary's Road", "", "Manchester", "", "M40 0BL", "Manchester"),
                   ("The Old Rectory, {n} Church Lane", "", "Little Snoring", "Norfolk", "NR21 0AA", "Norfolk"),
                   ("{n} Queen's Parade", "", "Cardiff", "Wales", "CF10 2BU", "Cardiff")],
        phones=["+44 7700 900###", "+44 20 7946 0###", "07700 900###"],
        mail=["gmail.com", "btinternet.com", "hotmail.co.uk", "outlook.com", "sky.com"],
        nets=[("BT", ["86.128.0.0/10", "81.128.0.0/12"], ["2a00:23c0::/28"]),
              ("Sky Broadband", ["90.192.0.0/11"], ["2a02:c7c::/32"]),
              ("Virgin Media", ["82.0.0.0/14", "86.0.0.0/13"], [])],
    ),
    dict(
        country="IE", lang="en-IE,en;q=0.9,ga;q=0.7", currency="EUR",
        names=["Seán O'Brien", "Aoife Ní Bhriain", "Ciarán MacCarthy", "Niamh O'Sullivan",
               "Pádraig Ó Súilleabháin", "Saoirse Byrne"],
        addresses=[("{n} O'Connell Street Upper", "Apt. 3", "Dublin 1", "Co. Dublin", "D01 F5P2", "Dublin"),
                   ("{n} St. Patrick's Hill", "", "Cork", "Co. Cork", "T23 K2W7", "Cork"),
                   ("Teach na Gréine, {n} Bóthar na Trá", "", "Gaillimh", "Co. na Gaillimhe", "H91 E2K3", "Galway")],
        phones=["+353 87 ### ####", "+353 1 ### ####", "087-###-####"],
        mail=["gmail.com", "eircom.net", "outlook.ie", "yahoo.ie"],
        nets=[("Eir", ["86.40.0.0/13", "79.97.0.0/16"], []),
              ("Vodafone Ireland", ["89.19.64.0/18"], []),
              ("Virgin Media Ireland", ["89.100.0.0/15"], [])],
    ),
    dict(
        country="DE", lang="de-DE,de;q=0.9,en;q=0.8", currency="EUR",
        names=["Jürgen Schröder", "Lena Weiß", "Maximilian von Stein", "Anneliese Köhler",
               "Lukas Groß", "Sophie Bäcker", "Björn Müller", "Zeynep Yıldız"],
        addresses=[("Straße des 17. Juni {n}", "", "Berlin", "", "10623", "Berlin"),
                   ("Königsallee {n}", "3. OG links", "Düsseldorf", "NRW", "40212", "Düsseldorf"),
                   ("Müllerstraße {n}a", "bei Fam. Schäfer", "München", "Bayern", "80469", "Munich"),
                   ("Am Weißenhof {n}", "", "Stuttgart", "BW", "70191", "Stuttgart"),
                   ("Große Bleichen {n}", "c/o Büro Nord", "Hamburg", "", "20354", "Hamburg")],
        phones=["+49 30 ######", "+49 151 ########", "0176 ########"],
        mail=["gmx.de", "web.de", "t-online.de", "gmail.com", "posteo.de"],
        nets=[("Deutsche Telekom", ["79.192.0.0/10", "87.128.0.0/10"], ["2003:c0::/28"]),
              ("Vodafone Deutschland", ["88.64.0.0/12"], ["2a02:8100::/28"]),
              ("Telefónica Germany", ["176.0.0.0/13"], [])],
    ),
    dict(
        country="CH", lang="de-CH,de;q=0.9,fr-CH;q=0.8,en;q=0.7", currency="CHF",
        names=["Reto Zürcher", "Mirjam Brunner", "Urs Gschwend", "Corinne Favre",
               "Beat Keller", "Nadja Rüegg"],
        addresses=[("Bahnhofstrasse {n}", "", "Zürich", "ZH", "8001", "Zürich"),
                   ("Rue du Rhône {n}", "", "Genève", "GE", "1204", "Geneva"),
                   ("Spalenberg {n}", "", "Basel", "BS", "4051", "Basel"),
                   ("Via Nassa {n}", "", "Lugano", "TI", "6900", "Lugano")],
        phones=["+41 79 ### ## ##", "+41 44 ### ## ##"],
        mail=["bluewin.ch", "gmx.ch", "gmail.com", "sunrise.ch"],
        nets=[("Swisscom", ["85.0.0.0/13", "178.192.0.0/13"], ["2a02:1210::/28"]),
              ("Sunrise", ["77.56.0.0/14"], [])],
    ),
    dict(
        country="FR", lang="fr-FR,fr;q=0.9,en;q=0.6", currency="EUR",
        names=["Théo Lefèvre", "Léa Dubois", "François Le Goff", "Chloé Bénard",
               "Anaïs D'Artois", "Jérôme Moreau", "Noémie Garçon", "Yasmine Benali"],
        addresses=[("{n} rue de l'Église", "Bât. B, 3e étage", "Paris", "", "75015", "Paris"),
                   ("{n} cours Mirabeau", "", "Aix-en-Provence", "", "13100", "Aix-en-Provence"),
                   ("{n} quai Saint-Antoine", "", "Lyon", "", "69002", "Lyon"),
                   ("{n} allée des Châtaigniers", "Résidence Les Pins, apt 12", "Nantes", "", "44000", "Nantes")],
        phones=["+33 6 ## ## ## ##", "06 ## ## ## ##", "+33 1 ## ## ## ##"],
        mail=["orange.fr", "free.fr", "laposte.net", "gmail.com", "sfr.fr"],
        nets=[("Orange", ["90.0.0.0/9", "86.192.0.0/10"], ["2a01:cb00::/32"]),
              ("Free SAS", ["82.64.0.0/10", "88.160.0.0/11"], ["2a01:e0a::/32"]),
              ("SFR", ["109.0.0.0/11"], [])],
    ),
    dict(
        country="ES", lang="es-ES,es;q=0.9", currency="EUR",
        names=["José Núñez", "Lucía Fernández de Córdoba", "Íñigo Etxeberria", "María José Iglesias",
               "Álvaro Muñoz", "Begoña García López"],
        addresses=[("Calle de Alcalá, {n}", "3º izq.", "Madrid", "Madrid", "28009", "Madrid"),
                   ("Passeig de Gràcia, {n}", "ático 2ª", "Barcelona", "Barcelona", "08008", "Barcelona"),
                   ("Avda. de la Constitución, {n}", "", "Sevilla", "Sevilla", "41001", "Seville"),
                   ("Kale Nagusia, {n}", "", "Donostia", "Gipuzkoa", "20003", "San Sebastián")],
        phones=["+34 6## ### ###", "+34 91 ### ## ##"],
        mail=["gmail.com", "hotmail.es", "telefonica.net", "yahoo.es"],
        nets=[("Telefónica de España", ["83.32.0.0/11", "88.0.0.0/12"], []),
              ("Vodafone Spain", ["62.83.0.0/16"], [])],
    ),
    dict(
        country="PT", lang="pt-PT,pt;q=0.9", currency="EUR",
        names=["Gonçalo Magalhães", "Conceição Araújo", "João Gonçalves", "Inês Sá"],
        addresses=[("Rua Garrett, {n}", "2.º Esq.", "Lisboa", "", "1200-204", "Lisbon"),
                   ("Avenida dos Aliados, {n}", "", "Porto", "", "4000-065", "Porto")],
        phones=["+351 91# ### ###", "+351 21# ### ###"],
        mail=["sapo.pt", "gmail.com", "netcabo.pt"],
        nets=[("MEO", ["85.240.0.0/13"], []), ("NOS", ["85.138.0.0/15"], [])],
    ),
    dict(
        country="BR", lang="pt-BR,pt;q=0.9,en;q=0.7", currency="BRL",
        names=["João Pedro dos Santos", "Luíza Araújo", "Thiago D'Ávila", "Ana Beatriz Gonçalves",
               "Maria da Conceição Silva", "Raimundo Nonato Ferreira"],
        addresses=[("Rua Augusta, {n} - apto 32", "Consolação", "São Paulo", "SP", "01305-000", "São Paulo"),
                   ("Av. Atlântica, {n}", "Copacabana", "Rio de Janeiro", "RJ", "22021-001", "Rio de Janeiro"),
                   ("Rua da Bahia, {n}", "sala 1201", "Belo Horizonte", "MG", "30160-011", "Belo Horizonte"),
                   ("SQS 308 Bloco {n}", "apto 204", "Brasília", "DF", "70355-030", "Brasília")],
        phones=["+55 11 9####-####", "+55 (21) 9####-####"],
        mail=["gmail.com", "uol.com.br", "bol.com.br", "hotmail.com"],
        nets=[("Vivo", ["177.32.0.0/11", "189.40.0.0/13"], ["2804:14c::/32"]),
              ("Claro NET", ["179.208.0.0/12", "187.0.0.0/12"], [])],
    ),
    dict(
        country="MX", lang="es-MX,es;q=0.9,en;q=0.6", currency="MXN",
        names=["Guadalupe Hernández", "Ximena de la Cruz", "Juan Pablo Ibáñez", "Sofía Gutiérrez Olvera"],
        addresses=[("Av. Paseo de la Reforma {n}", "Int. 5", "Ciudad de México", "CDMX", "06600", "Mexico City"),
                   ("Calle Morelos #{n}", "Col. Centro", "Guadalajara", "Jal.", "44100", "Guadalajara")],
        phones=["+52 55 #### ####", "+52 33 #### ####"],
        mail=["gmail.com", "hotmail.com", "prodigy.net.mx"],
        nets=[("Telmex", ["187.128.0.0/11", "189.128.0.0/11"], []), ("Telcel", ["189.203.0.0/16"], [])],
    ),
    dict(
        country="AR", lang="es-AR,es;q=0.9", currency="ARS",
        names=["Santiago Peña", "Valentina Ibarra", "Martín D'Alessandro", "Florencia Giménez"],
        addresses=[("Av. Corrientes {n}, 4° B", "", "Buenos Aires", "CABA", "C1043AAV", "Buenos Aires"),
                   ("Bv. San Juan {n}", "", "Córdoba", "Córdoba", "X5000", "Córdoba")],
        phones=["+54 9 11 ####-####"],
        mail=["gmail.com", "yahoo.com.ar", "fibertel.com.ar"],
        nets=[("Telecom Argentina", ["181.0.0.0/12"], []), ("Fibertel", ["190.16.0.0/13"], [])],
    ),
    dict(
        country="IT", lang="it-IT,it;q=0.9,en;q=0.6", currency="EUR",
        names=["Giuseppe D'Amico", "Chiara Dell'Acqua", "Niccolò Lo Russo", "Federica De Luca",
               "Lorenzo Esposito", "Martina Sant'Elia"],
        addresses=[("Via dell'Indipendenza, {n}", "scala B, int. 7", "Bologna", "BO", "40121", "Bologna"),
                   ("Corso Buenos Aires, {n}", "", "Milano", "MI", "20124", "Milan"),
                   ("Via Toledo, {n}", "", "Napoli", "NA", "80134", "Naples")],
        phones=["+39 3## ### ####", "+39 02 ########"],
        mail=["libero.it", "gmail.com", "virgilio.it", "tiscali.it"],
        nets=[("TIM", ["79.0.0.0/10", "87.0.0.0/12"], []), ("Fastweb", ["93.32.0.0/12"], ["2a01:ed8::/32"])],
    ),
    dict(
        country="PL", lang="pl-PL,pl;q=0.9,en;q=0.7", currency="PLN",
        names=["Łukasz Wiśniewski", "Agnieszka Grzegorzewska", "Wojciech Szczęsny-Kowal", "Małgorzata Woźniak",
               "Paweł Łęcki", "Zofia Kowalczyk"],
        addresses=[("ul. Piotrkowska {n}/6", "", "Łódź", "łódzkie", "90-102", "Łódź"),
                   ("ul. Świętokrzyska {n} m. 14", "", "Warszawa", "mazowieckie", "00-116", "Warsaw"),
                   ("Rynek Główny {n}", "", "Kraków", "małopolskie", "31-042", "Kraków"),
                   ("ul. Długa {n}", "", "Gdańsk", "pomorskie", "80-831", "Gdańsk")],
        phones=["+48 5## ### ###", "+48 6## ### ###"],
        mail=["wp.pl", "onet.pl", "o2.pl", "interia.pl", "gmail.com"],
        nets=[("Orange Polska", ["83.0.0.0/11", "31.60.0.0/14"], []), ("Play", ["37.47.0.0/16"], []),
              ("Netia", ["89.64.0.0/12"], [])],
    ),
    dict(
        country="CZ", lang="cs-CZ,cs;q=0.9", currency="CZK",
        names=["Jiří Dvořák", "Kateřina Růžičková", "Tomáš Černý", "Lucie Novotná"],
        addresses=[("Vinohradská {n}", "", "Praha 2", "", "120 00", "Prague"),
                   ("Masarykova {n}", "", "Brno", "", "602 00", "Brno")],
        phones=["+420 6## ### ###", "+420 7## ### ###"],
        mail=["seznam.cz", "email.cz", "gmail.com"],
        nets=[("O2 Czech Republic", ["90.176.0.0/12"], []), ("Vodafone CZ", ["46.135.0.0/16"], [])],
    ),
    dict(
        country="TR", lang="tr-TR,tr;q=0.9,en;q=0.6", currency="TRY",
        names=["Çağla Öztürk", "Oğuz Yılmaz", "Şeyma Çelik", "İbrahim Doğan", "Gülşen Şahin", "Emre Aydın"],
        addresses=[("Bağdat Cad. No:{n} D:5", "Kadıköy", "İstanbul", "", "34728", "Istanbul"),
                   ("Atatürk Bulvarı No:{n}", "Çankaya", "Ankara", "", "06680", "Ankara"),
                   ("Kıbrıs Şehitleri Cd. No:{n}", "Alsancak", "İzmir", "", "35220", "İzmir")],
        phones=["+90 5## ### ## ##", "0 (5##) ### ## ##"],
        mail=["gmail.com", "hotmail.com", "yandex.com.tr"],
        nets=[("Türk Telekom", ["78.160.0.0/11", "85.96.0.0/12"], []), ("Turkcell Superonline", ["88.224.0.0/11"], [])],
    ),
    dict(
        country="RU", lang="ru-RU,ru;q=0.9,en;q=0.6", currency="RUB",
        names=[("Алексей Иванов", "Aleksey Ivanov"), ("Наталья Смирнова", "Natalya Smirnova"),
               ("Дмитрий Кузнецов", "Dmitry Kuznetsov"), ("Ольга Соколова", "Olga Sokolova"),
               ("Сергей Попов", "Sergey Popov"), ("Екатерина Волкова", "Ekaterina Volkova")],
        addresses=[("ул. Тверская, д. {n}, кв. 12", "", "Москва", "", "125009", "Moscow"),
                   ("Невский пр-т, д. {n}, кв. 4", "", "Санкт-Петербург", "", "191186", "Saint Petersburg"),
                   ("Красный проспект, д. {n}", "", "Новосибирск", "Новосибирская обл.", "630099", "Novosibirsk"),
                   ("ул. Баумана, д. {n}", "", "Казань", "Республика Татарстан", "420111", "Kazan")],
        phones=["+7 9## ###-##-##", "8 (9##) ###-##-##"],
        mail=["mail.ru", "yandex.ru", "gmail.com", "rambler.ru"],
        nets=[("Rostelecom", ["95.24.0.0/13", "178.64.0.0/12"], []), ("MTS", ["91.76.0.0/14"], []),
              ("Beeline", ["85.140.0.0/14"], [])],
    ),
    dict(
        country="UA", lang="uk-UA,uk;q=0.9,en;q=0.7", currency="UAH",
        names=[("Олена Коваленко", "Olena Kovalenko"), ("Тарас Шевчук", "Taras Shevchuk"),
               ("Ірина Бойко", "Iryna Boiko"), ("Андрій Мельник", "Andrii Melnyk"),
               ("Оксана Ткаченко", "Oksana Tkachenko")],
        addresses=[("вул. Хрещатик, {n}, кв. 7", "", "Київ", "", "01001", "Kyiv"),
                   ("пр. Свободи, {n}", "", "Львів", "", "79000", "Lviv"),
                   ("вул. Дерибасівська, {n}", "", "Одеса", "", "65026", "Odesa")],
        phones=["+380 67 ### ## ##", "+380 50 ### ## ##"],
        mail=["ukr.net", "gmail.com", "i.ua"],
        nets=[("Kyivstar", ["176.36.0.0/14", "94.153.0.0/16"], []), ("Ukrtelecom", ["92.112.0.0/13"], [])],
    ),
    dict(
        country="GR", lang="el-GR,el;q=0.9,en;q=0.7", currency="EUR",
        names=[("Γιώργος Παπαδόπουλος", "Giorgos Papadopoulos"), ("Ελένη Νικολάου", "Eleni Nikolaou"),
               ("Δημήτρης Οικονόμου", "Dimitris Oikonomou"), ("Μαρία Γεωργίου", "Maria Georgiou"),
               ("Κωνσταντίνος Αλεξίου", "Konstantinos Alexiou")],
        addresses=[("Οδός Ερμού {n}", "3ος όροφος", "Αθήνα", "Αττική", "105 63", "Athens"),
                   ("Λεωφόρος Νίκης {n}", "", "Θεσσαλονίκη", "", "546 23", "Thessaloniki"),
                   ("Οδός 25ης Αυγούστου {n}", "", "Ηράκλειο", "Κρήτη", "712 02", "Heraklion")],
        phones=["+30 69# ### ####", "+30 210 ### ####"],
        mail=["gmail.com", "yahoo.gr", "otenet.gr"],
        nets=[("Cosmote", ["79.103.0.0/16", "94.64.0.0/13"], []), ("Vodafone Greece", ["178.59.0.0/16"], [])],
    ),
    dict(
        country="IL", lang="he-IL,he;q=0.9,en;q=0.8", currency="ILS",
        names=[("נועה כהן", "Noa Cohen"), ("יוסי לוי", "Yossi Levi"), ("תמר מזרחי", "Tamar Mizrahi"),
               ("אבי פרץ", "Avi Peretz"), ("שירה ביטון", "Shira Biton")],
        addresses=[("רחוב דיזנגוף {n}", "דירה 8", "תל אביב-יפו", "", "6433222", "Tel Aviv"),
                   ("רחוב יפו {n}", "", "ירושלים", "", "9434101", "Jerusalem"),
                   ("שדרות בן גוריון {n}", "", "חיפה", "", "3541320", "Haifa")],
        phones=["+972 5#-###-####", "05#-###-####"],
        mail=["gmail.com", "walla.co.il", "012.net.il"],
        nets=[("Bezeq International", ["79.176.0.0/13"], []), ("Partner", ["37.142.0.0/16"], []),
              ("HOT", ["212.179.0.0/16"], [])],
    ),
    dict(
        country="AE", lang="ar-AE,ar;q=0.9,en;q=0.8", currency="AED",
        names=[("مريم الشامسي", "Maryam Al Shamsi"), ("محمد العلي", "Mohammed Al-Ali"),
               ("عبد الله بن سعيد", "Abdullah bin Saeed"), "Ahmad Khan", "Fatima Al-Mansoori"],
        addresses=[("شارع الشيخ زايد، برج {n}", "شقة 1204", "دبي", "", "00000", "Dubai"),
                   ("Villa {n}, Street 14, Al Wasl", "", "Dubai", "", "00000", "Dubai"),
                   ("شارع الكورنيش، مبنى {n}", "", "أبوظبي", "", "00000", "Abu Dhabi")],
        phones=["+971 50 ### ####", "+971 55 ### ####"],
        mail=["gmail.com", "hotmail.com", "emirates.net.ae"],
        nets=[("Etisalat", ["94.200.0.0/13", "86.96.0.0/12"], []), ("du", ["2.50.0.0/15"], [])],
    ),
    dict(
        country="SA", lang="ar-SA,ar;q=0.9,en;q=0.6", currency="SAR",
        names=[("فاطمة الزهراء", "Fatima Al-Zahraa"), ("خالد العتيبي", "Khalid Al-Otaibi"),
               ("نورة القحطاني", "Noura Al-Qahtani"), ("عبد الرحمن الدوسري", "Abdulrahman Al-Dossari")],
        addresses=[("طريق الملك فهد، {n}", "حي العليا", "الرياض", "", "12214", "Riyadh"),
                   ("شارع التحلية، {n}", "", "جدة", "", "23424", "Jeddah")],
        phones=["+966 5# ### ####"],
        mail=["gmail.com", "hotmail.com", "outlook.sa"],
        nets=[("STC", ["37.104.0.0/13"], []), ("Mobily", ["188.48.0.0/13"], [])],
    ),
    dict(
        country="EG", lang="ar-EG,ar;q=0.9,en;q=0.7", currency="EGP",
        names=[("أحمد حسن", "Ahmed Hassan"), ("نور الهدى عبد الرحمن", "Nour El-Houda Abdelrahman"),
               ("يوسف المصري", "Youssef El-Masry"), ("ليلى فاروق", "Laila Farouk")],
        addresses=[("{n} شارع التحرير", "الدقي", "الجيزة", "", "12611", "Giza"),
                   ("{n} شارع 9", "المعادي", "القاهرة", "", "11728", "Cairo")],
        phones=["+20 10 #### ####", "+20 12 #### ####"],
        mail=["gmail.com", "yahoo.com", "outlook.com"],
        nets=[("TE Data", ["41.32.0.0/12"], []), ("Vodafone Egypt", ["156.192.0.0/11"], [])],
    ),
    dict(
        country="IN", lang="hi-IN,hi;q=0.9,en-IN;q=0.8,en;q=0.7", currency="INR",
        names=[("प्रिया शर्मा", "Priya Sharma"), ("राहुल वर्मा", "Rahul Verma"), ("अनन्या गुप्ता", "Ananya Gupta"),
               "Venkatesh Subramanian", "Lakshmi Narayanan", "Harpreet Kaur", "Anthony D'Souza",
               ("अर्जुन सिंह", "Arjun Singh")],
        addresses=[("मकान नं. {n}, सेक्टर 15", "", "नई दिल्ली", "दिल्ली", "110075", "New Delhi"),
                   ("Flat {n}, Sea Breeze Apts, Carter Road", "Bandra (W)", "Mumbai", "Maharashtra", "400050", "Mumbai"),
                   ("#{n}, 4th Cross, 80 Feet Road", "Koramangala 4th Block", "Bengaluru", "Karnataka", "560034", "Bengaluru"),
                   ("{n}/2 Anna Salai", "Teynampet", "Chennai", "Tamil Nadu", "600018", "Chennai")],
        phones=["+91 98### #####", "+91 70### #####"],
        mail=["gmail.com", "rediffmail.com", "yahoo.co.in"],
        nets=[("Reliance Jio", ["49.32.0.0/11"], ["2409:4040::/28"]), ("Bharti Airtel", ["122.160.0.0/13"], []),
              ("ACT Fibernet", ["106.51.0.0/16"], [])],
    ),
    dict(
        country="TH", lang="th-TH,th;q=0.9,en;q=0.6", currency="THB",
        names=[("สมชาย ใจดี", "Somchai Jaidee"), ("ณัฐธิดา ศรีสุข", "Natthida Srisuk"),
               ("ปิยะพงษ์ วงศ์ใหญ่", "Piyaphong Wongyai"), ("กนกวรรณ แก้วมณี", "Kanokwan Kaewmanee"),
               ("ธนากร บุญมา", "Thanakorn Boonma")],
        addresses=[("{n}/45 ถนนสุขุมวิท", "แขวงคลองเตย เขตคลองเตย", "กรุงเทพมหานคร", "", "10110", "Bangkok"),
                   ("{n} ถนนนิมมานเหมินท์", "ตำบลสุเทพ", "เชียงใหม่", "", "50200", "Chiang Mai")],
        phones=["+66 8# ### ####", "08#-###-####"],
        mail=["gmail.com", "hotmail.com"],
        nets=[("True Internet", ["171.96.0.0/13"], []), ("AIS Fibre", ["223.24.0.0/14"], []),
              ("3BB", ["110.164.0.0/14"], [])],
    ),
    dict(
        country="VN", lang="vi-VN,vi;q=0.9,en;q=0.6", currency="VND",
        names=["Nguyễn Thị Hương", "Trần Văn Minh", "Lê Hoàng Anh", "Phạm Quỳnh Như", "Đặng Quốc Bảo"],
        addresses=[("{n} Nguyễn Huệ", "Phường Bến Nghé, Quận 1", "TP. Hồ Chí Minh", "", "700000", "Ho Chi Minh City"),
                   ("Số {n} Hàng Bạc", "Quận Hoàn Kiếm", "Hà Nội", "", "100000", "Hanoi")],
        phones=["+84 9# ### ## ##", "09## ### ###"],
        mail=["gmail.com", "yahoo.com.vn"],
        nets=[("Viettel", ["27.64.0.0/12"], []), ("VNPT", ["113.160.0.0/11"], [])],
    ),
    dict(
        country="CN", lang="zh-CN,zh;q=0.9,en;q=0.6", currency="CNY",
        names=[("王芳", "Wang Fang"), ("李伟", "Li Wei"), ("张敏", "Zhang Min"), ("刘洋", "Liu Yang"),
               ("陈静", "Chen Jing"), ("周子涵", "Zhou Zihan"), ("吴思远", "Wu Siyuan")],
        addresses=[("浦东新区世纪大道{n}号", "3号楼1202室", "上海市", "上海市", "200120", "Shanghai"),
                   ("朝阳区建国路{n}号", "", "北京市", "北京市", "100022", "Beijing"),
                   ("天河区天河路{n}号", "", "广州市", "广东省", "510620", "Guangzhou"),
                   ("西湖区文三路{n}号", "", "杭州市", "浙江省", "310012", "Hangzhou")],
        phones=["+86 138 #### ####", "139########", "+86 186-####-####"],
        mail=["qq.com", "163.com", "126.com", "sina.com"],
        nets=[("China Telecom", ["113.64.0.0/11", "116.224.0.0/12"], []),
              ("China Unicom", ["123.112.0.0/12"], []),
              ("China Mobile", ["117.128.0.0/10"], ["2409:8a1e::/32"])],
    ),
    dict(
        country="TW", lang="zh-TW,zh;q=0.9,en;q=0.6", currency="TWD",
        names=[("林怡君", "Lin Yi-chun"), ("陳冠宇", "Chen Kuan-yu"), ("黃雅婷", "Huang Ya-ting"),
               ("張家豪", "Chang Chia-hao"), ("蔡佩珊", "Tsai Pei-shan")],
        addresses=[("信義區松仁路{n}號", "12樓之3", "台北市", "", "110", "Taipei"),
                   ("西屯區台灣大道三段{n}號", "", "台中市", "", "407", "Taichung")],
        phones=["+886 9##-###-###", "09##-###-###"],
        mail=["gmail.com", "yahoo.com.tw", "hotmail.com"],
        nets=[("Chunghwa Telecom", ["114.32.0.0/12", "36.224.0.0/12"], ["2001:b011::/32"]),
              ("Taiwan Mobile", ["49.216.0.0/14"], [])],
    ),
    dict(
        country="HK", lang="zh-HK,zh;q=0.9,en;q=0.8", currency="HKD",
        names=[("陳大文", "Chan Tai-man"), ("何嘉欣", "Ho Ka-yan"), "Wong Siu-ming", ("李詠詩", "Lee Wing-sze")],
        addresses=[("彌敦道{n}號", "10樓B室", "旺角", "九龍", "", "Mong Kok"),
                   ("Flat {n}, 8/F, Block C, Taikoo Shing", "", "Quarry Bay", "Hong Kong Island", "", "Quarry Bay")],
        phones=["+852 9### ####", "+852 6### ####"],
        mail=["gmail.com", "yahoo.com.hk", "netvigator.com"],
        nets=[("HKBN", ["203.198.0.0/16"], []), ("PCCW Netvigator", ["112.118.0.0/15"], [])],
    ),
    dict(
        country="JP", lang="ja-JP,ja;q=0.9,en;q=0.6", currency="JPY",
        names=[("山田 花子", "Hanako Yamada"), ("佐藤 健太", "Kenta Sato"), ("鈴木 美咲", "Misaki Suzuki"),
               ("高橋 翔", "Sho Takahashi"), ("田中 さくら", "Sakura Tanaka"), ("伊藤 大輔", "Daisuke Ito"),
               ("渡辺 結衣", "Yui Watanabe"), ("小林 蓮", "Ren Kobayashi")],
        addresses=[("神南1-{n}-3", "サンシャインマンション 402号室", "渋谷区", "東京都", "150-0041", "Shibuya, Tokyo"),
                   ("梅田2-{n}-10", "", "大阪市北区", "大阪府", "530-0001", "Osaka"),
                   ("中京区河原町通三条上る{n}", "", "京都市", "京都府", "604-8005", "Kyoto"),
                   ("北3条西{n}丁目", "", "札幌市中央区", "北海道", "060-0003", "Sapporo"),
                   ("天神2-{n}-1", "メゾン天神 501", "福岡市中央区", "福岡県", "810-0001", "Fukuoka")],
        phones=["+81 90-####-####", "080-####-####", "03-####-####"],
        mail=["yahoo.co.jp", "gmail.com", "docomo.ne.jp", "icloud.com"],
        nets=[("NTT Communications (OCN)", ["153.128.0.0/10", "180.0.0.0/12"], ["2400:4050::/32"]),
              ("KDDI", ["106.128.0.0/10"], []), ("SoftBank", ["126.0.0.0/8"], [])],
    ),
    dict(
        country="KR", lang="ko-KR,ko;q=0.9,en;q=0.6", currency="KRW",
        names=[("김민준", "Kim Min-jun"), ("이서연", "Lee Seo-yeon"), ("박지훈", "Park Ji-hoon"),
               ("최수빈", "Choi Su-bin"), ("정하은", "Jung Ha-eun"), ("강도윤", "Kang Do-yun")],
        addresses=[("서울특별시 강남구 테헤란로 {n}", "101동 1502호", "서울", "", "06236", "Seoul"),
                   ("부산광역시 해운대구 해운대해변로 {n}", "", "부산", "", "48099", "Busan"),
                   ("경기도 성남시 분당구 판교역로 {n}", "", "성남", "경기도", "13494", "Seongnam")],
        phones=["+82 10-####-####", "010-####-####"],
        mail=["naver.com", "daum.net", "gmail.com", "kakao.com"],
        nets=[("KT", ["175.192.0.0/10", "121.128.0.0/10"], []), ("SK Broadband", ["58.120.0.0/13"], []),
              ("LG U+", ["106.240.0.0/12"], [])],
    ),
    dict(
        country="SG", lang="en-SG,en;q=0.9,zh-CN;q=0.7", currency="SGD",
        names=["Tan Wei Ming", "Nur Aisyah binte Rahman", "Rajesh s/o Kumar", "Lim Hui Min", "Chloe Ng"],
        addresses=[("Blk {n} Tampines St 21", "#08-123", "Singapore", "", "520123", "Singapore"),
                   ("{n} Orchard Road", "#14-01 The Heeren", "Singapore", "", "238855", "Singapore")],
        phones=["+65 9### ####", "+65 8### ####"],
        mail=["gmail.com", "singnet.com.sg", "yahoo.com.sg"],
        nets=[("Singtel", ["116.14.0.0/15"], []), ("StarHub", ["116.86.0.0/15"], [])],
    ),
    dict(
        country="AU", lang="en-AU,en;q=0.9", currency="AUD",
        names=["Lachlan O'Rourke", "Matilda Mitchell", "Aroha Ngata", "Kylie McKenzie", "Thanh Nguyen"],
        addresses=[("{n}/12 Bondi Rd", "", "Bondi", "NSW", "2026", "Sydney"),
                   ("{n} Lygon St", "", "Carlton", "VIC", "3053", "Melbourne"),
                   ("Unit {n}, 8 Wickham Tce", "", "Brisbane City", "QLD", "4000", "Brisbane")],
        phones=["+61 4## ### ###", "04## ### ###"],
        mail=["gmail.com", "bigpond.com", "outlook.com.au"],
        nets=[("Telstra", ["101.160.0.0/11", "120.144.0.0/12"], ["2001:8003::/32"]), ("Optus", ["49.176.0.0/12"], [])],
    ),
    dict(
        country="CA", lang="en-CA,en;q=0.9,fr-CA;q=0.8", currency="CAD",
        names=["Étienne Tremblay", "Geneviève Côté", "Liam MacDonald", "Chloé St-Pierre", "Harjit Sandhu"],
        addresses=[("{n} rue Saint-Denis", "app. 3", "Montréal", "QC", "H2X 3K4", "Montréal"),
                   ("{n} Queen St W", "Unit 1102", "Toronto", "ON", "M5V 2A8", "Toronto"),
                   ("{n} Robson St", "", "Vancouver", "BC", "V6E 1C3", "Vancouver")],
        phones=["+1 (514) 555-01##", "+1 416-555-01##"],
        mail=["gmail.com", "videotron.ca", "rogers.com", "sympatico.ca"],
        nets=[("Rogers", ["99.224.0.0/11", "174.112.0.0/12"], []), ("Bell Canada", ["70.48.0.0/13", "142.112.0.0/12"], []),
              ("Vidéotron", ["24.200.0.0/13"], [])],
    ),
    dict(
        country="NL", lang="nl-NL,nl;q=0.9,en;q=0.8", currency="EUR",
        names=["Daan van der Berg", "Sanne de Vries", "Joost van 't Hof", "Fleur Jansen", "Bram Bakker"],
        addresses=[("Keizersgracht {n}-II", "", "Amsterdam", "", "1016 DK", "Amsterdam"),
                   ("Markt {n}", "", "'s-Hertogenbosch", "", "5211 JV", "'s-Hertogenbosch"),
                   ("Oudegracht {n} bis", "", "Utrecht", "", "3511 AL", "Utrecht")],
        phones=["+31 6 ########", "06-########"],
        mail=["gmail.com", "ziggo.nl", "kpnmail.nl", "hotmail.nl"],
        nets=[("KPN", ["77.160.0.0/11"], ["2a02:a440::/32"]), ("Ziggo", ["84.24.0.0/13"], [])],
    ),
    dict(
        country="SE", lang="sv-SE,sv;q=0.9,en;q=0.8", currency="SEK",
        names=["Åsa Lindqvist", "Björn Åkesson", "Märta Nyström", "Erik Söderberg"],
        addresses=[("Drottninggatan {n}", "lgh 1102", "Stockholm", "", "111 51", "Stockholm"),
                   ("Kungsportsavenyn {n}", "", "Göteborg", "", "411 36", "Gothenburg")],
        phones=["+46 70 ### ## ##", "070-### ## ##"],
        mail=["gmail.com", "telia.com", "hotmail.se"],
        nets=[("Telia", ["78.64.0.0/12", "90.224.0.0/12"], []), ("Bahnhof", ["213.80.96.0/19"], [])],
    ),
    dict(
        country="NO", lang="nb-NO,nb;q=0.9,no;q=0.8,en;q=0.7", currency="NOK",
        names=["Øystein Bjørnstad", "Sølvi Ødegård", "Ingrid Hægeland", "Håkon Løvås"],
        addresses=[("Karl Johans gate {n}", "", "Oslo", "", "0154", "Oslo"),
                   ("Bryggen {n}", "", "Bergen", "", "5003", "Bergen")],
        phones=["+47 4## ## ###", "+47 9## ## ###"],
        mail=["online.no", "gmail.com", "hotmail.no"],
        nets=[("Telenor", ["84.208.0.0/13"], []), ("Telia Norge", ["46.9.0.0/16"], [])],
    ),
    dict(
        country="ZA", lang="en-ZA,en;q=0.9,af;q=0.7", currency="ZAR",
        names=["Thandiwe Nkosi", "Pieter van der Merwe", "Lerato Mokoena", "Sipho Dlamini", "Annelie du Plessis"],
        addresses=[("{n} Long Street", "", "Cape Town", "Western Cape", "8001", "Cape Town"),
                   ("{n} Vilakazi St", "Orlando West", "Soweto", "Gauteng", "1804", "Soweto")],
        phones=["+27 82 ### ####", "+27 71 ### ####"],
        mail=["gmail.com", "webmail.co.za", "telkomsa.net"],
        nets=[("Telkom SA", ["105.224.0.0/11"], []), ("Vodacom", ["41.0.0.0/12"], [])],
    ),
    dict(
        country="NG", lang="en-NG,en;q=0.9,yo;q=0.6", currency="NGN",
        names=["Chukwuemeka Okafor", "Adaeze Nwosu", "Oluwaseun Adeyemi", "Ngozi Eze", "Aisha Bello"],
        addresses=[("{n} Adeola Odeku Street", "Victoria Island", "Lagos", "Lagos", "101241", "Lagos"),
                   ("Plot {n}, Aminu Kano Crescent", "Wuse II", "Abuja", "FCT", "904101", "Abuja")],
        phones=["+234 803 ### ####", "+234 816 ### ####"],
        mail=["gmail.com", "yahoo.com"],
        nets=[("MTN Nigeria", ["102.88.0.0/13"], []), ("Airtel Nigeria", ["105.112.0.0/12"], [])],
    ),
    dict(
        country="ID", lang="id-ID,id;q=0.9,en;q=0.7", currency="IDR",
        names=["Putu Ayu Lestari", "Budi Santoso", "Dewi Kartika Sari", "Rizky Pratama"],
        addresses=[("Jl. Jend. Sudirman Kav. {n}", "", "Jakarta Selatan", "DKI Jakarta", "12190", "Jakarta"),
                   ("Jl. Raya Ubud No. {n}", "", "Gianyar", "Bali", "80571", "Ubud")],
        phones=["+62 812-####-####", "0813-####-####"],
        mail=["gmail.com", "yahoo.co.id"],
        nets=[("Telkomsel", ["114.120.0.0/13"], []), ("IndiHome", ["36.64.0.0/11"], [])],
    ),
    dict(
        country="PH", lang="en-PH,en;q=0.9,fil;q=0.8", currency="PHP",
        names=["María Cristina dela Cruz", "Mark Anthony Reyes", "Rhea Mae Bautista", "Jose Miguel Santos Jr."],
        addresses=[("Unit {n}, Tower 2, Avida Towers", "Brgy. San Lorenzo", "Makati City", "Metro Manila", "1223", "Makati"),
                   ("{n} Gorordo Ave", "Lahug", "Cebu City", "Cebu", "6000", "Cebu")],
        phones=["+63 917 ### ####", "0918 ### ####"],
        mail=["gmail.com", "yahoo.com"],
        nets=[("PLDT", ["112.198.0.0/15"], []), ("Globe Telecom", ["49.144.0.0/13"], [])],
    ),
]

USD_RATE = {
    "USD": 1, "EUR": 0.92, "GBP": 0.79, "CHF": 0.88, "BRL": 5.0, "MXN": 17.0, "ARS": 1050,
    "PLN": 4.0, "CZK": 23.0, "TRY": 34.0, "RUB": 92.0, "UAH": 41.0, "ILS": 3.7, "AED": 3.67,
    "SAR": 3.75, "EGP": 48.0, "INR": 83.0, "THB": 36.0, "VND": 25000, "CNY": 7.2, "TWD": 32.0,
    "HKD": 7.8, "JPY": 150, "KRW": 1350, "SGD": 1.35, "AUD": 1.5, "CAD": 1.36, "SEK": 10.5,
    "NOK": 10.7, "ZAR": 18.5, "NGN": 1500, "IDR": 15800, "PHP": 56.0,
}
ZERO_DECIMAL = {"JPY", "KRW", "VND", "IDR"}
CURRENCY_SYMBOL = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "CNY": "¥", "KRW": "₩",
                   "INR": "₹", "BRL": "R$", "PLN": "zł", "TRY": "₺", "RUB": "₽", "ILS": "₪",
                   "THB": "฿", "VND": "₫", "UAH": "₴", "PHP": "₱", "NGN": "₦"}

# --------------------------------------------------------------------------------------------
# Catalogue: key -> (sku, display name, price in USD)
# --------------------------------------------------------------------------------------------

PRODUCTS = {
    "levis501": ("sku-10023", "Levi's 501® Original Fit Jeans", 69.5),
    "scriptmug": ("sku-10241", "Script Font Mug – \"Mum\"", 14.99),
    "unionjack": ("sku-10377", "Union Jack Canvas Tote", 24),
    "sleepmask": ("sku-10412", "Mulberry Silk Sleep Mask", 19.99),
    "pingpong": ("sku-10588", "Foldable Ping Pong Table (Outdoor)", 399),
    "curlcream": ("sku-10634", "Curl Cream 8 fl oz", 12.5),
    "cppprimer": ("sku-10702", "C++ Primer (5th Edition)", 49.99),
    "rubyearrings": ("sku-10815", "Ruby Red Drop Earrings", 34),
    "snakeboots": ("sku-10966", "Python Snakeskin Ankle Boots", 189),
    "soadtee": ("sku-11023", "System of a Down T-Shirt", 25),
    "rug5x8": ("sku-11140", "5' x 8' Moroccan Wool Rug", 249),
    "attsim": ("sku-11257", "AT&T Prepaid SIM Kit", 10),
    "ricecooker": ("sku-11380", "象印 圧力IH炊飯ジャー 5.5合", 289),
    "greentea": ("sku-11402", "西湖龙井 礼盒装 250g", 58),
    "sunscreen": ("sku-11517", "자작나무 수분 선크림 SPF50+", 18),
    "oud": ("sku-11633", "عطر عود ملكي 100ml", 120),
    "candles": ("sku-11748", "Shabbat Candles (72 pack)", 9.9),
    "valenki": ("sku-11859", "Валенки женские, натуральная шерсть", 54),
    "oliveoil": ("sku-11961", "Κρητικό Ελαιόλαδο 5L", 65),
    "kurta": ("sku-12074", "Cotton Kurta (Men's)", 29),
    "mangomix": ("sku-12188", "Mango Sticky Rice Kit", 8.5),
    "mugpl": ("sku-12290", "Kubek „Łódź Fabryczna”", 11),
    "saopaulo": ("sku-12345", "Camisa São Paulo FC 2026", 79.9),
    "chocolate": ("sku-12451", "Zürcher Schokolade – Assortiment 500 g", 32),
    "torch": ("sku-12566", "Chalumeau de cuisine (crème brûlée)", 27),
    "zapatos": ("sku-12679", "Zapatos de niña – charol", 39),
    "cay": ("sku-12784", "Çay Bardağı Seti 6'lı", 22),
    "aodai": ("sku-12890", "Áo dài cách tân lụa", 45),
    "vyshyvanka": ("sku-12999", "Вишиванка жіноча льон", 68),
    "echomount": ("sku-13042", "Echo Dot Wall Mount", 15.99),
    "tablerunner": ("sku-13157", "Linen Table Runner 14\" x 108\"", 29),
    "tomjerry": ("sku-13260", "Tom & Jerry: The Complete Collection (DVD)", 44.99),
    "jacket": ("sku-13374", "Rain Jacket \"StormPro\"", 119),
    "blender": ("sku-13488", "Quiet Blender 1.5 L", 89),
    "mouse": ("sku-13591", "Ergonomic Wireless Mouse (Left-Handed)", 39.99),
    "usbhub": ("sku-13605", "USB-C Hub 7-in-1; 4K HDMI", 34.99),
    "kneeler": ("sku-13722", "Garden Kneeler & Seat", 42),
    "serum": ("sku-13839", "Vitamin C Serum 20% + Hyaluronic Acid", 24),
    "mmdispenser": ("sku-13946", "M&M's Candy Dispenser", 19),
    "chinos": ("sku-14057", "Slim Chinos – Navy Blue", 49),
    "cattree": ("sku-14163", "Cat Tree XL (for large cats)", 139),
    "drmartens": ("sku-14270", "Dr. Martens 1460 8-Eye Boots", 169),
    "goldchain": ("sku-14388", "14k Gold Rope Chain 18\"", 299),
    "kallax": ("sku-14402", "Fabric Insert 13\"x13\" (KALLAX-style)", 12),
    "vinyl": ("sku-14519", "Rock 'n' Roll Classics – Vinyl 2LP", 35),
    "scarf": ("sku-14626", "Merino Sjaal – Antraciet", 39),
    "beanie": ("sku-14733", "Ullmössa – Grå", 25),
    "mugcz": ("sku-14840", "Hrnek „Dobré ráno“", 9),
    "giftbox": ("sku-14951", "Thank-You Gift Box", 29),
    "headphones": ("sku-15068", "Noise Cancelling Headphones (Over-Ear)", 199),
    "phonecase": ("sku-15172", "iPhone 15 Pro Case w/ MagSafe", 29),
    "dress": ("sku-15286", "Wrap Dress – Plus Size (2XL+)", 59),
    "soycandle": ("sku-15391", "Soy Candle \"Sunday Morning\" 8 oz", 18),
    "pokemon": ("sku-15404", "Pokémon TCG Booster Box", 144),
    "switch": ("sku-15517", "Nintendo Switch OLED", 349),
    "bonsai": ("sku-15623", "LEGO® Icons Bonsai Tree", 49.99),
    "sneakers": ("sku-15738", "Air Max 90 – White/Black", 130),
    "matcha": ("sku-15842", "宇治抹茶 30g 缶", 22),
    "hanbok": ("sku-15957", "아동 한복 (돌복) 세트", 85),
    "perfume": ("sku-16061", "N°5 Eau de Parfum 50 ml", 135),
    "lipstick": ("sku-16174", "Lipstick #520 \"Rouge Éclat\"", 28),
    "airfryer": ("sku-16288", "Air Fryer 5.5 qt", 99),
    "babymonitor": ("sku-16302", "Baby Monitor (Wi-Fi) 2K", 79),
    "yogamat": ("sku-16419", "Yoga Mat 6mm – Ocean Blue", 32),
    "sleepmask2": ("sku-16527", "Weighted Sleep Mask – Lavender", 29),
    "curltongs": ("sku-16633", "Curling Wand 25 mm (1\")", 45),
}

# --------------------------------------------------------------------------------------------
# Content pools
# --------------------------------------------------------------------------------------------

# (slug, query text, what the user is looking for)
SEARCHES = [
    ("select-your-size-guide", "select your size guide", "the size guide, in words that start like SQL"),
    ("union-jack-tote", "union jack tote", "a Union Jack tote bag"),
    ("script-font-mug", "script font mug", "a mug printed in a script font"),
    ("system-of-a-down-tshirt", "system of a down t-shirt", "a System of a Down band t-shirt"),
    ("ruby-red-earrings", "ruby red earrings", "ruby red earrings"),
    ("python-snakeskin-boots", "python snakeskin boots", "snakeskin boots"),
    ("silk-sleep-mask", "silk sleep mask", "a silk sleep mask"),
    ("ping-pong-table-outdoor", "ping pong table outdoor", "an outdoor ping pong table"),
    ("curl-cream-3a-hair", "curl cream for 3a hair", "a curl cream for type 3a hair"),
    ("cpp-primer-5th-edition", "C++ Primer 5th edition", "the C++ Primer book"),
    ("att-prepaid-sim", "AT&T prepaid SIM card", "an AT&T prepaid SIM card"),
    ("rug-5-by-8-feet", "5' x 8' rug", "a rug sized in feet with apostrophes"),
    ("levis-501-registered", "Levi's 501® jeans", "Levi's 501 jeans, typed with the ® sign"),
    ("quoted-noise-cancelling", "\"noise cancelling\" headphones", "headphones, with a quoted exact phrase"),
    ("mens-shoes-ten-and-a-half", "men's running shoes size 10½", "men's running shoes in a half size"),
    ("kids-jackets-half-off", "kids jackets 50% off", "discounted kids' jackets, with a percent sign"),
    ("japanese-rice-cooker", "炊飯器 5合", "a rice cooker, in Japanese"),
    ("chinese-longjing-tea", "龙井绿茶 礼盒装", "a Longjing green tea gift box, in Chinese"),
    ("korean-sunscreen", "선크림 SPF50+", "sunscreen, in Korean"),
    ("arabic-oud-perfume", "عطر عود", "oud perfume, in Arabic"),
    ("hebrew-shabbat-candles", "נרות שבת", "Shabbat candles, in Hebrew"),
    ("russian-valenki", "валенки женские 38 размер", "women's felt boots, in Russian"),
    ("greek-cretan-olive-oil", "ελαιόλαδο κρήτης 5 λίτρα", "Cretan olive oil, in Greek"),
    ("hindi-cotton-kurta", "कॉटन कुर्ता पुरुषों के लिए", "a men's cotton kurta, in Hindi"),
    ("thai-mango-sticky-rice", "ข้าวเหนียวมะม่วง", "a mango sticky rice kit, in Thai"),
    ("polish-lodz-souvenirs", "pamiątki z Łodzi", "souvenirs from Łódź, in Polish"),
    ("sao-paulo-fc-shirt", "camisa São Paulo FC 2026", "a São Paulo FC shirt"),
    ("zurich-chocolate", "Schokolade aus Zürich", "chocolate from Zürich, in German"),
    ("emoji-birthday-balloons", "🎈 birthday balloons 🎉", "birthday balloons, with emoji in the query"),
    ("hashtag-ootd-dress", "#ootd summer dress", "a summer dress, starting with a hashtag"),
    ("gifts-under-20-dollars", "gifts under $20", "gifts under twenty dollars"),
    ("phone-case-five-euro", "phone case €5", "a five-euro phone case"),
    ("japanese-snacks-under-1000-yen", "お菓子 ¥1000以下", "Japanese snacks under 1000 yen"),
    ("drop-off-point-locker", "drop-off point locker", "parcel lockers to use as a drop-off point"),
    ("ergonomic-mouse-left-handed", "wireless mouse (ergonomic, left-handed)", "a left-handed ergonomic mouse, with parentheses"),
    ("usb-c-hub-semicolon", "usb-c hub; 4k hdmi", "a USB-C hub, with a semicolon in the query"),
    ("christmas-time-to-order", "christmas delivery time to order by", "the last order date for Christmas delivery"),
    ("tom-and-jerry-collection", "Tom & Jerry complete collection", "a Tom & Jerry DVD box set"),
    ("rock-n-roll-vinyl", "rock 'n' roll vinyl records", "rock 'n' roll records"),
    ("dr-martens-1460", "Dr. Martens 1460 8-eye boots", "Dr. Martens boots"),
    ("m-and-ms-dispenser", "M&M's candy dispenser", "an M&M's dispenser"),
    ("plus-size-dress-2xl", "plus size dress 2XL+", "a plus-size dress"),
    ("gold-chain-18-inch", "14k gold chain 18\" length", "an 18-inch gold chain, with an inch mark"),
    ("iphone-case-magsafe", "iPhone 15 Pro case w/ MagSafe", "an iPhone case, with a slash"),
    ("vitamin-c-serum-percent", "vitamin C serum 20% + hyaluronic acid", "a vitamin C serum, with % and +"),
    ("spanish-girls-shoes", "zapatos de niña talla 28", "girls' shoes, in Spanish"),
    ("french-creme-brulee-torch", "chalumeau pour crème brûlée", "a crème brûlée torch, in French"),
    ("german-coffee-machine", "Kaffeevollautomat mit Milchschäumer", "a bean-to-cup coffee machine, in German"),
    ("turkish-tea-glasses", "çay bardağı seti 6'lı", "a set of Turkish tea glasses"),
    ("vietnamese-ao-dai", "áo dài cách tân", "a modern áo dài, in Vietnamese"),
    ("ukrainian-vyshyvanka", "вишиванка жіноча", "an embroidered shirt, in Ukrainian"),
    ("cat-tree-large-cats", "cat tree for large cats", "a cat tree"),
    ("echo-dot-wall-mount", "echo dot wall mount", "a wall mount for a smart speaker"),
    ("linen-table-runner", "linen table runner 14 x 108", "a linen table runner"),
    ("wheres-my-order-help", "where's my order", "the order-tracking help page"),
    ("black-or-navy-chinos", "black or navy chinos and belt", "chinos, with 'or' and 'and' in the query"),
    ("kallax-style-insert", "KALLAX-style shelf insert 13\"x13\"", "a shelf insert with inch marks"),
    ("sku-copy-paste", "SKU 10023-NVY-M", "a SKU copied from a receipt"),
    ("curling-wand-one-inch", "curling wand 1\" barrel", "a one-inch curling wand"),
    ("baby-monitor-wifi", "baby monitor wi-fi 2k (no subscription)", "a Wi-Fi baby monitor"),
]

SEARCH_FILTERS = {
    "sort": ["price_asc", "price_desc", "newest", "relevance", "rating_desc", "bestselling"],
    "page": ["2", "3", "4", "7"],
    "size": ["S", "M", "L", "XL", "38", "10.5", "2XL"],
    "color": ["navy blue", "ruby red", "black", "off-white", "khaki/olive", "rosé gold", "grey"],
    "price_min": ["10", "25", "50"],
    "price_max": ["20", "49.99", "100", "250"],
    "category": ["women/shoes", "home & kitchen", "books", "beauty", "kids"],
    "in_stock": ["1", "true"],
    "per_page": ["24", "48"],
}

# Product page views: (slug, product key, raw query string, what is special)
PRODUCT_VIEWS = [
    ("levis-501-plain", "levis501", "", "opens the product page"),
    ("script-mug-from-search", "scriptmug", "ref=search&pos=3", "opens from search results"),
    ("chinos-variant", "chinos", "variant=navy-blue&size=M", "opens with a variant preselected"),
    ("rug-newsletter-utm", "rug5x8", "utm_source=newsletter&utm_medium=email&utm_campaign=spring_sale_2026", "follows a newsletter link with UTM tags"),
    ("rice-cooker-yen", "ricecooker", "currency=JPY&lang=ja", "views prices in yen"),
    ("headphones-gclid", "headphones", "gclid=Cj0KCQiA2KitBhCIARIsAPPMEhKz8fL1mQx3v_9aN0pTq7rVbW2cY4eHdJsU5o6iG8kL1nR3tS7uV9wX0yZaEAAwE", "arrives from a search ad with a gclid"),
    ("sneakers-fbclid", "sneakers", "fbclid=IwAR2x9Jb7kQm4Tt0Lr8VwYz3NcPdEf6GhIjKlMnOpQrStUvWxYz1A2B3C4D5E", "arrives from a social post with an fbclid"),
    ("earrings-color-encoded", "rubyearrings", "color=ruby%20red", "has a colour with an encoded space"),
    ("half-size-encoded", "drmartens", "size=10%C2%BD", "has a half size encoded as UTF-8"),
    ("snake-boots-from-query", "snakeboots", "from=search&q=python+snakeskin+boots&pos=4", "carries the search terms along"),
    ("tee-reviews-page-2", "soadtee", "review_page=2&sort=helpful", "pages through reviews"),
    ("lipstick-shade-hash", "lipstick", "shade=%23C0392B", "selects a shade by hex colour"),
    ("mug-engraving-ampersand", "mugpl", "engrave=J%26K", "previews an engraving with an ampersand"),
    ("compare-two-skus", "mouse", "compare=sku-13591,sku-13605", "compares two products"),
    ("tea-chinese-ui", "greentea", "lang=zh-CN", "views the page in Chinese"),
    ("bonsai-affiliate", "bonsai", "affiliate=blog-emmas-kitchen&sub_id=apr26", "arrives from an affiliate blog"),
    ("table-runner-gallery", "tablerunner", "preview=0&view=gallery", "opens the gallery view"),
    ("kallax-share-link", "kallax", "ref=share&share_id=aGVsbG8tZnJvbS1hbm5h", "opens a link a friend shared"),
    ("candles-plain", "candles", "", "checks the details before a holiday"),
    ("switch-recommendation", "switch", "from=cart&rec_id=5f0c2d7e-8b1a-4c3e-9d2f-6a7b8c9d0e1f", "follows a cart recommendation"),
    ("oud-arabic-ui", "oud", "lang=ar&currency=AED", "views the page in Arabic with dirham prices"),
    ("matcha-matomo-campaign", "matcha", "pk_campaign=spring&pk_kwd=matcha%20uji", "follows a tracked campaign link"),
    ("hanbok-size-chart", "hanbok", "tab=size-chart&age=12m", "opens the size chart tab"),
]

# (slug, product key, qty, options or None, description)
CART_ITEMS = [
    ("levis-501-one", "levis501", 1, {"size": "32x30", "color": "medium stonewash"}, "adds a pair of Levi's 501® jeans"),
    ("script-mug-engraved", "scriptmug", 2, {"engraving": "Mom's 60th ♥"}, "adds two engraved mugs for a birthday"),
    ("union-jack-tote-gift", "unionjack", 1, {"gift_wrap": True, "gift_message": "Happy birthday, Zoë! Don't open before the 12th ;)"}, "adds a gift-wrapped tote with a message"),
    ("sleep-mask-three", "sleepmask", 3, None, "adds three sleep masks"),
    ("curl-cream-single", "curlcream", 1, None, "adds a curl cream"),
    ("cpp-primer-book", "cppprimer", 1, {"format": "paperback"}, "adds the C++ Primer paperback"),
    ("ruby-earrings-gift", "rubyearrings", 1, {"gift_message": "To O'Malley — #1 sister. Love, J & K"}, "adds earrings with a gift note"),
    ("snakeskin-boots-size", "snakeboots", 1, {"size": "EU 39 / UK 6"}, "adds boots with a slash in the size"),
    ("system-tee-two-sizes", "soadtee", 2, {"size": "L"}, "adds two band t-shirts"),
    ("att-sim-plain", "attsim", 1, None, "adds a prepaid SIM kit"),
    ("rug-runner-size", "rug5x8", 1, {"size": "5' x 8'"}, "adds a rug sized in feet"),
    ("rice-cooker-jp", "ricecooker", 1, {"voltage": "100V", "color": "ホワイト"}, "adds a Japanese rice cooker"),
    ("tea-gift-boxes", "greentea", 4, None, "adds four tea gift boxes"),
    ("chain-length-inches", "goldchain", 1, {"length": "18\""}, "adds a gold chain with an inch mark in its length"),
    ("jersey-name-number", "saopaulo", 1, {"size": "G", "personalization": "JOÃO #10"}, "adds a personalised football shirt"),
    ("vinyl-two", "vinyl", 2, None, "adds two vinyl records"),
    ("chinos-navy", "chinos", 1, {"size": "32/32", "color": "navy blue"}, "adds navy chinos"),
    ("phone-case-magsafe", "phonecase", 1, {"color": "midnight (matte)"}, "adds a phone case"),
    ("serum-refill", "serum", 2, {"subscription": "every 8 weeks"}, "adds a serum subscription"),
    ("mm-dispenser-office", "mmdispenser", 5, {"note": "2 for the office & 3 for the kids' party"}, "adds dispensers for an office and a party"),
    ("yoga-mat-ocean", "yogamat", 1, None, "adds a yoga mat"),
    ("pokemon-box-limit", "pokemon", 1, None, "adds a booster box"),
    ("lego-bonsai-gift", "bonsai", 1, {"gift_wrap": True, "gift_message": "Für Oma & Opa – frohe Ostern! 🐣"}, "adds a gift-wrapped LEGO set with a German message"),
    ("kurta-size-chart", "kurta", 2, {"size": "40 (M)", "color": "इंडिगो"}, "adds kurtas with a Hindi colour name"),
    ("cay-set-turkish", "cay", 1, {"gift_message": "Annem'e sevgilerle 🌷"}, "adds tea glasses with a Turkish gift note"),
]

ORDER_NOTES = [
    ("neighbour-flat-12", "Please leave it with the neighbour at #12 if I'm not home."),
    ("ring-twice", "Ring twice; the doorbell's a bit broken :)"),
    ("gift-no-invoice", "Gift — please don't include the invoice/price tag."),
    ("parcel-locker", "Drop-off point: the parcel locker at the supermarket (Locker #4471)."),
    ("call-before", "Call me on +44 7700 900123 before delivery, thanks!"),
    ("okihai-japanese", "置き配希望です。玄関前にお願いします。"),
    ("locker-chinese", "请放在快递柜，谢谢！"),
    ("security-office-korean", "경비실에 맡겨 주세요. 감사합니다 :)"),
    ("call-30-min-russian", "Пожалуйста, позвоните за 30 минут до доставки."),
    ("call-first-arabic", "الرجاء الاتصال قبل التوصيل، شكراً"),
    ("leave-at-door-hebrew", "נא להשאיר ליד הדלת, תודה!"),
    ("doorman-portuguese", "Por favor, entregar na portaria (horário: 8h–18h)."),
    ("neighbour-german", "Bitte beim Nachbarn (Fam. Schäfer, 2. OG) abgeben, falls niemand öffnet."),
    ("after-six-french", "Merci de livrer après 18h — digicode : 4B27."),
    ("surprise-plain-box", "It's a surprise for my wife, so please use plain packaging!"),
    ("fragile-glass", "Fragile: glass (3 pcs) — handle with care & keep upright ↑"),
    ("time-to-order-late", "Time to order was 23:58, hope it still ships today 🙏"),
    ("back-door-text", "Leave at back door & text me at (512) 555-0134 when it's there."),
    ("security-booth-thai", "ถ้าไม่มีคนอยู่ ฝากไว้ที่ป้อม รปภ. ครับ"),
    ("office-hours-vietnamese", "Vui lòng giao trong giờ hành chính (8h-17h)."),
    ("christmas-no-rush", "No rush; it's for Christmas (25/12)."),
    ("buzzer-broken", "Parcel for O'Neill, flat 2/1 — buzzer doesn't work, call 0141 496 0000"),
    ("baby-sleeping-turkish", "Kapı şifresi 1907; zili çalmayın, bebek uyuyor 👶"),
    ("paczkomat-polish", "Proszę zostawić paczkę w paczkomacie WAW123M."),
    ("portiere-italian", "Lasciare al portiere, grazie! (Sig.ra Dell'Acqua)"),
    ("empty", ""),
    ("side-gate", "Side gate is unlocked; please put the box under the porch (not in the rain!)."),
]

# (slug, order id, raw query, description)
ORDER_LOOKUPS = [
    ("status-plain", "ord-2026-004417", "", "checks the status of a recent order"),
    ("with-tracking", "ord-2026-008812", "include=tracking", "opens an order with its tracking events"),
    ("uuid-id", "7c9e6679-7425-40de-944b-e07fc1f90ae7", "", "opens an order identified by a UUID"),
    ("german-ui", "ord-2026-009921", "lang=de", "checks an order in German"),
    ("from-email-link", "ord-2026-010203", "utm_source=transactional&utm_medium=email&utm_content=shipped", "follows the 'your order has shipped' e-mail"),
    ("invoice-tab", "ord-2026-011345", "tab=invoice&format=pdf", "opens the invoice tab of an order"),
    ("return-status", "ord-2026-012876", "view=return&rma=RMA-55821", "checks the status of a return"),
    ("items-and-timeline", "b1f0c7e2-3d4a-4e5b-8c6d-7e8f9a0b1c2d", "include=items%2Ctimeline", "opens an order with items and timeline"),
]

COUPONS = [
    ("spring-2026", "SPRING-2026", "the spring campaign code"),
    ("free-ship", "FREE-SHIP", "a free-shipping code"),
    ("welcome10", "WELCOME10", "a welcome discount"),
    ("summer-sale-26", "SUMMER_SALE_26", "a summer sale code with underscores"),
    ("blackfriday-50", "BLACKFRIDAY-50", "a Black Friday code"),
    ("newyear2026", "NEWYEAR2026", "a new-year code"),
    ("vip-gold", "VIP-GOLD-7F3K", "a personal VIP code"),
    ("five-off-fifty", "5OFF50", "a five-off-fifty code"),
    ("back2school", "BACK2SCHOOL", "a back-to-school code"),
    ("student-15", "STUDENT-15", "a student discount"),
    ("happy-618", "HAPPY-618", "a 618 shopping festival code"),
    ("double11-100", "DOUBLE11-100", "a Singles' Day code"),
    ("thankyou-code", "THANKYOU-AB12CD", "a thank-you code printed on a packing slip"),
    ("refer-a-friend", "REFER-MARIA23", "a friend's referral code"),
    ("lowercase-typed", "spring-2026", "the spring code typed in lower case"),
    ("pasted-with-spaces", " FREE-SHIP ", "a code pasted with surrounding spaces"),
    ("eid-mubarak", "EID-MUBARAK-20", "an Eid promotion code"),
    ("diwali-2026", "DIWALI2026", "a Diwali code"),
    ("fruehling-umlaut", "FRÜHLING-10", "a German spring code with an umlaut"),
    ("mothers-day", "MOTHERSDAY_25", "a Mother's Day code"),
    ("app-only", "APP-ONLY-5", "an app-only code"),
]

LOTTERY_EVENTS = [
    ("live-2026-12-01", "live-2026-12-01", None),
    ("double11-live", "live-2026-11-11-double11", {"room_id": "room-88231"}),
    ("kpop-fanmeet", "live-2026-08-15-kpop-fanmeet", {"source": "live_room"}),
    ("520-live", "live-2026-05-20-520", None),
    ("tanabata", "live-2026-07-07-tanabata", {"source": "push"}),
    ("hinamatsuri-stream", "stream-2026-03-03-hinamatsuri", None),
    ("golden-week-cn", "live-2026-10-01-golden-week", {"room_id": "room-10086", "source": "share_link", "share_code": "Xk9-Pq2"}),
    ("childrens-day", "live-2026-06-01-childrens-day", None),
    ("tenth-anniversary", "anniv-10th-2026-09-15", {"source": "banner"}),
    ("lunar-new-year", "live-2026-02-17-lunar-new-year", None),
    ("christmas-eve", "live-2026-12-24-xmas-eve", {"room_id": "room-2412"}),
    ("sneaker-drop", "live-2026-04-04-sneaker-drop", None),
    ("back-to-school", "live-2026-09-01-back-to-school", {"source": "live_room"}),
    ("new-year-countdown", "live-2026-12-31-countdown", None),
    ("pi-day", "live-2026-03-14-pi-day", {"source": "push"}),
    ("summer-kickoff", "live-2026-06-26-summer-kickoff", None),
    ("beauty-week", "live-2026-10-24-beauty-week", {"room_id": "room-77012", "source": "live_room"}),
    ("black-friday", "live-2026-11-27-black-friday", None),
]

PASSWORDS = [
    "P@ss'w0rd!;", "Tr0ub4dor&3", "correct horse battery staple", "Ünïcødé-Pässwörd-2026",
    "p4$$w0rd#2026", "It's-My-Party-99", "Summer2026!!", "ma-clé-secrète-€42", "パスワード2026",
    "Qwerty!@#$%^", "1qaz@WSX3edc", "(Caf3Latt3)", "<3myDog2026", "Don't-Panic-42", "Ŝtr0ng&L0ng!",
    "Z\"quoted\"z-77", "semi;colon;2026", "hash#tag#love", "100%Secure?", "пароль_Москва1",
    "كلمةالسر2026", "רוני1985!", "Γεια-σου-2026", "ข้าวมันไก่99", "mango/banana/kiwi",
    "Ab12-Cd34-Ef56-Gh78", "tHiS iS a PaSsPhRaSe 🙂", "~Tilde^Caret`2026", "O'Brien&Sons1999",
]

# (slug, product key, rating, title, text)
REVIEWS = [
    ("levis-501-perfect-fit", "levis501", 5, "Perfect fit — finally!",
     "I'm 5'4\" and usually a 28 in Levi's 501®; the 28x30 fits perfectly.\nWashed it twice (cold, inside out) and it hasn't shrunk. Would buy again!"),
    ("script-mug-lettering", "scriptmug", 4, "Good mug, but the \"script font\" is smaller than pictured",
     "Ordered the script font mug for my mum's birthday. It's lovely & sturdy, dishwasher-safe so far (5 cycles).\n\nOnly gripe: the lettering is ~2 cm tall, not the 3 cm it looks like in the photo."),
    ("union-jack-tote-huge", "unionjack", 5, "Union Jack tote is huge",
     "Fits a 15\" laptop, a water bottle and my lunch. Stitching's solid; the print hasn't cracked after 3 months of daily use."),
    ("sleep-mask-light-leak", "sleepmask", 3, "Sleep mask: comfy but lets light in",
     "It's soft and doesn't press on my eyes, which is great. But light leaks in around the nose (I have a narrow nose bridge). 3/5 — fine for naps, not for night shifts."),
    ("ping-pong-assembly", "pingpong", 5, "Best ping pong table for the price",
     "Assembly took 2 people ~90 min. Instructions were clear (step 14 is tricky; watch the video on https://shop.example.com/help/ping-pong-assembly).\nBounce is consistent across the whole surface. Kids love it!"),
    ("curl-cream-crunchy", "curlcream", 2, "Curl cream made my hair crunchy",
     "I have 3B curls & fine hair. Even a pea-sized amount left it stiff :( Maybe better for thicker hair? Returning it."),
    ("cpp-primer-course", "cppprimer", 5, "C++ Primer is still the best intro",
     "Bought this for my CS course (intro to C++11/14). Clear explanations, good exercises; chapter 12 on dynamic memory is gold.\nNote: the paperback spine is a bit fragile."),
    ("ruby-earrings-colour", "rubyearrings", 4, "Ruby red earrings - gorgeous colour",
     "Colour is a deep ruby red, exactly like the photo. The posts are a little short for thicker lobes, so 4 stars instead of 5."),
    ("snakeskin-boots-scuffed", "snakeboots", 1, "Python snakeskin boots arrived scuffed",
     "The left boot had a 2\" scuff on the heel right out of the box. Customer service were nice and sent a prepaid label (ticket #88213), but I'm still disappointed."),
    ("system-tee-concert", "soadtee", 5, "System of a Down t-shirt = instant classic",
     "Soft cotton, print is sharp. Size L fits true to size (I'm 6'1\", 190 lbs). Wore it to the show last week 🤘"),
    ("rug-living-room", "rug5x8", 4, "5' x 8' rug looks great in our living room",
     "Colours are slightly more muted than online. It sheds a bit for the first week - vacuum every couple of days and it's fine. Non-slip pad recommended!"),
    ("att-sim-activation", "attsim", 5, "AT&T SIM activated in 5 minutes",
     "Popped it in, went to the activation page, done. Kept my old number too. Great for my mom's backup phone."),
    ("rice-cooker-japanese", "ricecooker", 5, "最高の炊飯器です！",
     "毎朝使っています。ご飯がふっくら炊けて、保温も長時間OK。\n内釜が少し重いのが難点ですが、☆5にします。"),
    ("tea-chinese", "greentea", 4, "茶叶很香，包装精美",
     "送给父母的礼物，他们很喜欢。物流有点慢（用了5天），其他都很好。"),
    ("sunscreen-korean", "sunscreen", 5, "선크림 발림성 최고",
     "백탁 현상 없고 끈적이지 않아요! 민감성 피부인데도 트러블 없었어요 😊\n재구매 의사 100%"),
    ("oud-arabic", "oud", 4, "عطر رائع وثباته ممتاز",
     "الرائحة جميلة جداً وتدوم طوال اليوم. السعر مرتفع قليلاً لكن يستحق."),
    ("candles-hebrew", "candles", 5, "מוצר מעולה!",
     "הנרות דולקים יפה ולא מטפטפים. הגיע תוך 3 ימים. ממליצה בחום."),
    ("valenki-russian", "valenki", 4, "Тёплые и удобные валенки",
     "Размер 38 подошёл идеально. Немного пахнут шерстью первые дни, но это нормально.\nДоставка в Новосибирск — 6 дней."),
    ("olive-oil-greek", "oliveoil", 5, "Εξαιρετικό λάδι!",
     "Πολύ αρωματικό, ιδανικό για σαλάτες. Θα ξαναπαραγγείλω σίγουρα."),
    ("kurta-hindi", "kurta", 4, "अच्छी क्वालिटी का कुर्ता",
     "कपड़ा बहुत आरामदायक है और रंग धोने के बाद भी नहीं गया। साइज़ थोड़ा बड़ा है, एक साइज़ छोटा लें।"),
    ("mango-kit-thai", "mangomix", 5, "อร่อยมาก ทำง่าย",
     "ทำตามสูตรบนกล่องได้เลย หอมกะทิมาก ลูกๆ ชอบครับ 👍"),
    ("lodz-mug-polish", "mugpl", 5, "Świetna jakość!",
     "Kubek dotarł do Łodzi w 2 dni, dobrze zapakowany. Nadruk nie schodzi po zmywarce. Polecam!"),
    ("sao-paulo-shirt-portuguese", "saopaulo", 4, "Camisa linda, tamanho certo",
     "Comprei o tamanho G pro meu pai e serviu direitinho. Só achei o frete pra São Paulo meio caro (R$ 29,90)."),
    ("zurich-chocolate-german", "chocolate", 3, "Schokolade gut, Versand naja",
     "Die Schokolade aus Zürich schmeckt super, aber bei 28 °C kam sie leicht angeschmolzen an. Vielleicht im Sommer mit Kühlakku versenden?"),
    ("creme-brulee-torch-french", "torch", 5, "Parfait pour la crème brûlée",
     "Flamme réglable, facile à recharger. J'ai fait 12 crèmes brûlées d'un coup sans problème. Rapport qualité/prix : top !"),
    ("girls-shoes-spanish", "zapatos", 4, "Muy cómodos para mi hija",
     "Los zapatos talla 28 le quedan perfectos. La suela es un poco resbaladiza en el suelo de la cocina, pero nada grave."),
    ("gift-italian", "giftbox", 5, "Ottimo acquisto",
     "L'ho regalato a mia sorella: è piaciuto tantissimo! Spedizione veloce a Milano, imballo curato."),
    ("tea-glasses-turkish", "cay", 5, "Çok şık bardaklar",
     "6'lı set eksiksiz ve kırıksız geldi. Çay keyfimiz ikiye katlandı ☕"),
    ("ao-dai-vietnamese", "aodai", 5, "Áo dài đẹp lắm",
     "Vải mềm, đường may kỹ. Mình cao 1m58, nặng 48kg mặc size M vừa in."),
    ("vyshyvanka-ukrainian", "vyshyvanka", 4, "Гарна вишиванка",
     "Вишивка акуратна, тканина приємна. Трохи довгі рукави, але мама вкоротила 🙂"),
    ("echo-mount-clean", "echomount", 5, "Echo Dot wall mount – clean look",
     "No drilling needed, it just plugs into the outlet. Cable management is neat. Works with the 5th gen."),
    ("table-runner-drop-off-point", "tablerunner", 4, "Drop-off point pickup was easy",
     "Chose the drop-off point at my local pharmacy; got a text with a QR code and picked it up in 2 min. The linen table runner itself is lovely, slightly wrinkled from the packaging."),
    ("tom-and-jerry-kids", "tomjerry", 5, "Tom & Jerry collection, hours of fun",
     "All 7 discs work. My kids (4 & 7) binge it every weekend... which is either a 5-star or a 1-star review depending on how you look at it 😂"),
    ("jacket-not-waterproof", "jacket", 3, "OK but 'waterproof' is a stretch",
     "The jacket is \"water-resistant\" at best. Light rain: fine. Proper downpour: soaked through after ~20 min. Warm and well-cut though."),
    ("blender-pros-cons", "blender", 5, "Exactly as described!!!",
     "Arrived early, well packed, works great.\n\n+ quiet\n+ easy to clean\n- cord could be longer\n\nOverall 10/10 would recommend."),
    ("mouse-wfh", "mouse", 4, "Great for #wfh",
     "The left-handed version took 2 days to get used to; my wrist pain is mostly gone. Battery: ~6 weeks on one AA."),
    ("usb-hub-hot", "usbhub", 2, "USB-C hub gets hot",
     "Works with my MacBook; 4K@60Hz over HDMI is fine. But it gets really hot (I measured ~55°C) after an hour, and the SD reader drops out sometimes."),
    ("kneeler-dads-70th", "kneeler", 5, "Bought for my dad's 70th",
     "He's 70 years young & loves gardening. The kneeler seat is sturdy, folds flat, and the tool pouches are handy. Gift wrap was a nice touch (thanks for the handwritten note!)"),
    ("serum-six-weeks", "serum", 4, "Vitamin C serum: noticeable results",
     "Been using it AM for 6 weeks with SPF 50. Dark spots are lighter. It tingles a bit the first few days — that's normal for 20% L-ascorbic acid apparently."),
    ("mm-dispenser-office", "mmdispenser", 5, "M&M's dispenser is a hit at the office",
     "Dispenses ~10 pieces per push. Holds a full 1 lb bag. Our team's snack drawer will never be the same."),
    ("chinos-wrong-item", "chinos", 1, "Wrong item sent",
     "Ordered the navy blue chinos (32/32) and got khaki 34/30. I've opened a return; hoping the exchange is quick. Rating will change if it's sorted."),
    ("cat-tree-maine-coons", "cattree", 4, "Cat tree: sturdy, big cats approved",
     "Our two Maine Coons (8 kg & 9 kg) can both sit on the top perch without it wobbling. Assembly ~45 min. Sisal posts are already getting shredded, as intended :)"),
    ("dr-martens-break-in", "drmartens", 5, "Dr. Martens 1460s – break-in tips",
     "They're stiff at first (as expected). Wear thick socks for a week, use the leather balm on the heel area. After ~2 weeks they're the comfiest boots I own."),
    ("gold-chain-length", "goldchain", 5, "14k chain, 18\" is the perfect length",
     "Sits right at the collarbone. Clasp is secure. Came with a little polishing cloth & certificate."),
    ("kallax-insert-thin", "kallax", 3, "Fits, but...",
     "The 13\"x13\" insert fits the KALLAX-style shelf, but the fabric is thinner than expected & the handle ripped after a month."),
    ("vinyl-mint", "vinyl", 5, "Rock 'n' roll vinyl in mint condition",
     "Sealed, no warping, sounds amazing on my turntable. Sleeve has a small price-sticker residue — whatever, it's a 1950s reissue compilation."),
    ("scarf-dutch", "scarf", 4, "Fijne sjaal",
     "Lekker warm en zacht. De kleur is iets donkerder dan op de foto, maar nog steeds mooi. Bezorging naar 's-Hertogenbosch ging snel."),
    ("beanie-swedish", "beanie", 5, "Perfekt för vintern",
     "Mössan är varm och kliar inte. Storleken passar bra (huvudomfång 57 cm). Snabb leverans till Göteborg!"),
    ("mug-czech", "mugcz", 4, "Dobrá kvalita",
     "Hrnek je pěkný, jen ucho je trochu menší. Doručení do Brna za 3 dny."),
    ("little-things", "soycandle", 5, "It's the little things",
     "Ordered at 11pm, delivered next day by 10am. The box had a \"thank you\" sticker & a 10% code for next time. Small touches like that make me a repeat customer :-)"),
]

# (slug, subject, message, order id or None)
SUPPORT = [
    ("wheres-my-order", "Where's my order?",
     "Hi, my order #ord-2026-004417 was supposed to arrive on Monday (03/16) but tracking hasn't updated since it left the depot. Could you check? Thanks, Seán", "ord-2026-004417"),
    ("update-my-address", "Update my address",
     "I've moved — please update my address to Flat 2/1, 14 O'Neill St, Glasgow G12 8QQ. The old one (Apt #4B) should be removed.", None),
    ("delete-my-old-card", "Delete my old card",
     "Can you delete my old card ending in 1881? It expired 09/25 & I can't remove it in the app (the delete button is greyed out).", None),
    ("alert-me-back-in-stock", "Alert me when back in stock",
     "Is there a way to get an alert when the ruby red earrings are back in stock? The \"notify me\" button doesn't seem to do anything on Safari.", None),
    ("coupon-not-working", "Coupon SPRING-2026 not working",
     "I entered SPRING-2026 at checkout and it says \"invalid code\". My cart total is $84.50 so it should qualify (min. $50), right?", None),
    ("charged-twice", "Charged twice?",
     "My bank shows two charges of €129.50 on 2026-03-02 for the same order. One is pending; is that just an authorization hold?", "ord-2026-007731"),
    ("wrong-size-delivered", "Wrong size delivered",
     "I ordered size M (the \"select your size\" dropdown said M) but the label says L. Can I exchange it? I still have the tags & box.", "ord-2026-006120"),
    ("drop-off-points-lodz", "Question about drop-off points",
     "Are there any drop-off points near Łódź Kaliska station? The map only shows ones in Warsaw for me.", None),
    ("delivery-date-japanese", "配送日時の変更について",
     "注文番号 ord-2026-008812 の配送日を3月22日(日)の午前中に変更できますか？よろしくお願いします。", "ord-2026-008812"),
    ("refund-status-chinese", "退款进度查询",
     "你好，我在3月5日申请了退款（订单号 ord-2026-009921），请问什么时候能到账？谢谢！", "ord-2026-009921"),
    ("exchange-korean", "교환 문의드립니다",
     "사이즈가 작아서 한 치수 큰 걸로 교환하고 싶어요. 택은 그대로 있습니다.", None),
    ("order-arabic", "استفسار عن الطلب",
     "مرحباً، طلبي لم يصل بعد. رقم الطلب ord-2026-010203. شكراً لكم.", "ord-2026-010203"),
    ("pickup-point-hebrew", "שאלה לגבי משלוח",
     "האם אפשר לשלוח לנקודת איסוף בחיפה? תודה!", None),
    ("return-russian", "Вопрос по возврату",
     "Здравствуйте! Как вернуть товар, если коробка уже выброшена? Заказ № ord-2026-011345.", "ord-2026-011345"),
    ("invoice-vat-german", "Rechnung mit USt-IdNr.",
     "Guten Tag, könnten Sie mir eine Rechnung mit unserer USt-IdNr. (DE 123456789) ausstellen? Firma: Müller & Söhne GmbH, Straße des 17. Juni 12, 10623 Berlin.", None),
    ("delivery-neighbour-french", "Problème de livraison",
     "Bonjour, le livreur a laissé le colis chez un voisin que je ne connais pas (n° 14 ?). Pouvez-vous vérifier la preuve de livraison ? Merci d'avance.", None),
    ("warranty-spanish", "Garantía del producto",
     "Hola, la freidora de aire dejó de funcionar a los 2 meses. ¿Cubre la garantía? Tengo la factura.", None),
    ("business-invoicing", "Business account / invoices",
     "We're a small café (Beans & Co.) ordering ~40 mugs/month. Do you offer net-30 invoicing? Our VAT no. is GB 123 4567 89.", None),
    ("gift-message-typo", "Gift message typo",
     "I wrote \"Happy Brithday\" in the gift message 🤦 — can you change it to \"Happy Birthday, Nana! Love, J & K\" before it ships?", "ord-2026-013002"),
    ("app-logs-me-out", "App keeps logging me out",
     "Every time I close the app (iOS 17.4, iPhone 13) I have to log in again. I've tried reinstalling. \"Remember me\" is ticked.", None),
    ("time-to-order-christmas", "Time to order for Christmas delivery?",
     "What's the last time to order for delivery to Toronto (M5V) before Dec 24? Standard or express?", None),
    ("price-drop", "Price drop after purchase",
     "I bought the air fryer for $129.99 on Monday and today it's $99.99 (-23%). Do you offer price adjustments within 14 days?", "ord-2026-013377"),
    ("missing-part", "Missing item from bundle",
     "The bonsai set came without the small pot (part #37 in the manual). Everything else is there.", None),
    ("accessibility-feedback", "Accessibility feedback",
     "The checkout page's \"Place order\" button isn't announced by VoiceOver. Just FYI — otherwise the site works great with a screen reader.", None),
    ("change-of-email", "Change of email",
     "Please change my account email from kenta.sato@yahoo.co.jp to k.sato+shop@gmail.com. I can verify with my phone +81 90-1234-5678.", None),
    ("lottery-prize", "Lottery prize not received",
     "I won in the live draw on 2026-12-01 (event live-2026-12-01) — the app said \"Congrats! 🎉\" but nothing is in my account. Screenshot attached in the app chat.", None),
    ("flash-sale-sold-out", "Flash sale: item was in cart but sold out",
     "During the 11.11 flash sale the sneakers were in my cart at ¥8,990 but at checkout it said sold out. Will there be a restock?", None),
    ("damaged-rug", "Damaged on arrival",
     "The 5' x 8' rug arrived with a big tear along one edge (about 10 cm). Photos: https://photos.example.net/album/rug-damage-2026 — can you send a replacement?", "ord-2026-014455"),
    ("close-account", "Request to close my account",
     "I'd like to close my account and have my data deleted (GDPR Art. 17). Please confirm once done. Thanks!", None),
    ("exchange-vietnamese", "Vui lòng hỗ trợ đổi hàng",
     "Mình muốn đổi áo dài size M sang size L. Đơn hàng ord-2026-012876. Cảm ơn shop!", "ord-2026-012876"),
    ("delivery-thai", "สอบถามเรื่องการจัดส่ง",
     "สั่งของไปวันที่ 3 มี.ค. ยังไม่ได้รับเลยครับ ช่วยเช็คให้หน่อยครับ", None),
    ("missing-screws", "Ping pong table missing screws",
     "Bag C (the M6 x 30mm bolts) was missing 4 pieces. Can you mail them? I don't need a whole new table, lol.", None),
]

FLASH_SALES = [
    "fs-2026-03-20-sneakers", "fs-2026-11-11-double-eleven", "fs-2026-06-18-midyear",
    "fs-2026-07-15-summer-deals", "fs-2026-11-27-black-friday", "fs-2026-12-12-double-twelve",
    "fs-2026-04-01-spring-kickoff", "fs-2026-05-05-golden-week", "fs-2026-08-08-kpop-merch",
    "fs-2026-09-09-99-sale", "fs-2026-10-10-anniversary", "fs-2026-02-14-valentines",
    "fs-2026-03-08-womens-day", "fs-2026-12-26-boxing-day", "fs-2026-02-17-lunar-new-year",
    "fs-2026-03-17-st-patricks", "fs-2026-05-10-mothers-day", "fs-2026-06-21-fathers-day",
    "fs-2026-09-25-mid-autumn", "fs-2026-10-31-halloween", "fs-2026-12-01-cyber-week",
    "fs-2026-03-20-eid-al-fitr", "fs-2026-11-08-diwali", "fs-2026-04-13-songkran",
    "fs-2026-01-02-new-year-clearance",
]
FLASH_GET_QUERIES = ["", "tz=Asia%2FTokyo", "lang=ko", "ref=push", "", "countdown=1",
                     "utm_source=app_push&utm_campaign=flash", "lang=zh-CN&tz=Asia%2FShanghai",
                     "", "from=banner&slot=2", "currency=INR", "preview=0"]

ACCOUNT_QUERIES = [
    ("overview", "", "opens the account overview"),
    ("with-addresses", "include=addresses", "loads saved addresses"),
    ("selected-fields", "fields=name,email,phone", "loads just the contact fields"),
    ("orders-page-2", "tab=orders&page=2", "pages through past orders"),
    ("japanese-ui", "lang=ja-JP", "opens the account page in Japanese"),
    ("wallet", "view=wallet", "checks the wallet and saved cards"),
    ("addresses-and-cards", "include=addresses%2Cpayment_methods", "loads addresses and payment methods"),
    ("notifications", "section=notifications", "opens notification settings"),
    ("wishlist-newest", "tab=wishlist&sort=added_desc", "opens the wishlist, newest first"),
    ("from-newsletter-footer", "ref=email_footer&utm_source=newsletter", "follows the account link in a newsletter"),
    ("euro-currency", "currency=EUR", "views balances in euros"),
    ("returns", "tab=returns", "checks open returns"),
    ("active-coupons", "tab=coupons&status=active", "lists active coupons"),
    ("security", "tab=security", "opens security settings"),
    ("warsaw-timezone", "tz=Europe%2FWarsaw", "opens the account with a time-zone parameter"),
]

DISPLAY_NAMES = ["Zoë ✨", "Mr. O'Brien", "ケンタ🍜", "J&K Crafts", "小雨☔", "sam (they/them)",
                 "Café Owner ☕", "the_real_maria_23", "Ahmad 🇦🇪", "Dr. Lena Weiß", "#1 Grandma",
                 "Łukasz W.", "Ana B. 🌻", "김민준", "Tom \"TJ\" Jones", "Nana (O'Hara)"]

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

rng = random.Random(SEED)

def ascii_fold(s):
    s = (s.replace("ł", "l").replace("Ł", "L").replace("ø", "o").replace("Ø", "O")
         .replace("ß", "ss").replace("æ", "ae").replace("đ", "d").replace("Đ", "D")
         .replace("ı", "i"))
    s = unicodedata.normalize("NFKD", s)
    return "".join(c for c in s if not unicodedata.combining(c) and ord(c) < 128)

def digits_fill(template):
    return "".join(str(rng.randint(0, 9)) if c == "#" else c for c in template)

def slugify(s):
    s = re.sub(r"[^a-z0-9]+", "-", ascii_fold(s).lower()).strip("-")
    return re.sub(r"-+", "-", s)

def b64url(raw):
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")

def rand_hex(n):
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))

def rand_uuid():
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))

def compact_json(obj):
    """JSON text as a browser's JSON.stringify would send it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))

def money(usd, currency):
    v = usd * USD_RATE[currency]
    if currency in ZERO_DECIMAL:
        step = 1000 if currency in ("VND", "IDR") else (100 if currency == "KRW" else 10)
        return int(round(v / step) * step) or step
    if v >= 1000:
        return int(round(v / 10) * 10)
    v = round(v, 2)
    cents = rng.choice([0.99, 0.5, 0.0, 0.95, 0.49])
    v = round(int(v) + cents, 2)
    return int(v) if v == int(v) else v

# Query-string encoders, as different clients send them.
def enc_form(v):        # HTML form submission / URLSearchParams: spaces as '+'
    return urllib.parse.quote_plus(v, safe="")

def enc_component(v):   # encodeURIComponent: spaces as %20, keeps -_.!~*'()
    return urllib.parse.quote(v, safe="-_.!~*'()")

def enc_axios(v):       # axios default serializer: encodeURIComponent, then : $ , [ ] raw, %20 -> '+'
    return enc_component(v).replace("%3A", ":").replace("%24", "$").replace("%2C", ",") \
        .replace("%5B", "[").replace("%5D", "]").replace("%20", "+")

ENCODERS = [enc_form, enc_component, enc_axios]

def build_query(pairs, encoder):
    return "&".join(f"{encoder(k)}={encoder(v)}" for k, v in pairs)

def parse_query(q):
    return dict(urllib.parse.parse_qsl(q, keep_blank_values=True)) if q else {}


class Uniq:
    def __init__(self):
        self.user_ids, self.device_ids, self.ips, self.names = set(), set(), set(), set()

    def user_id(self):
        while True:
            u = f"u-{rng.randint(100000, 9999999)}"
            if u not in self.user_ids:
                self.user_ids.add(u)
                return u

    def device_id(self):
        while True:
            d = f"dev-{rand_hex(16)}"
            if d not in self.device_ids:
                self.device_ids.add(d)
                return d

    def ip(self, loc):
        for _ in range(1000):
            isp, v4, v6 = rng.choice(loc["nets"])
            use_v6 = bool(v6) and rng.random() < 0.35
            net = ipaddress.ip_network(rng.choice(v6 if use_v6 else v4))
            addr = net.network_address + rng.randrange(1, net.num_addresses - 1)
            if not addr.is_global or any(addr in n for n in FORBIDDEN_NETS if n.version == addr.version):
                continue
            s = str(addr)
            if s not in self.ips:
                self.ips.add(s)
                return s, isp
        raise RuntimeError("could not find a fresh IP for " + loc["country"])

    def name(self, base):
        n, i = base, 2
        while n in self.names:
            n = f"{base}-{i}"
            i += 1
        self.names.add(n)
        return n


# --------------------------------------------------------------------------------------------
# User agents
# --------------------------------------------------------------------------------------------

NON_BROWSER = re.compile(
    r"bot|crawl|spider|slurp|preview|validator|scraper|fetch|feed|wget|curl|python|java/|libwww|"
    r"perl|httpclient|download|offline|webcopier|webzip|searchexpress|firephp|untrusted|p3p|"
    r"htmlparser|csscheck|jigsaw|emailwolf|mediapartners|adsbot|grub|gulper|gais|bloglines|"
    r"gregarius|url control|teoma|^user agent|3gpp-gba|novarra|ask jeeves|toolbar|alexa|"
    r"sdk build|android 0\.5|playstation|nintendo|wii|xbox", re.I)

def load_user_agents(path, scanner_path):
    with open(path, encoding="utf-8") as f:
        lines = [l.strip() for l in f if l.strip()]
    scanners = []
    if os.path.exists(scanner_path):
        with open(scanner_path, encoding="utf-8") as f:
            scanners = [l.strip().lower() for l in f if l.strip() and not l.lstrip().startswith("#")]
    out, seen = [], set()
    for ua in lines:
        if ua in seen:
            continue
        seen.add(ua)
        if not (ua.startswith("Mozilla/5.0") or ua.startswith("Opera/9.8")):
            continue
        if NON_BROWSER.search(ua):
            continue
        if any(s in ua.lower() for s in scanners):
            continue
        out.append(ua)
    return out

TABLET = re.compile(r"iPad|Tablet|Xoom|GT-P\d|SCH-I800|KFTT|Silk|PlayBook|hp-tablet|A500 Build|BNTV|TouchPad|Kindle", re.I)
MOBILE = re.compile(r"Mobile|iPhone|iPod|Opera Mini|Opera Mobi|BlackBerry|BB10|IEMobile|Windows Phone|"
                    r"Symbian|S60|webOS|Maemo|MeeGo|Fennec|UCWEB|UCBrowser|Nokia|Minimo", re.I)

def device_type(ua):
    if TABLET.search(ua):
        return "tablet"
    if "X11" in ua and "Android" not in ua and "Minimo" not in ua:
        return "desktop"
    if MOBILE.search(ua):
        return "mobile"
    if "Android" in ua:
        return "tablet"
    return "desktop"


class UAPool:
    def __init__(self, uas):
        self.uas = list(uas)
        rng.shuffle(self.uas)
        self.i = 0

    def next(self):
        ua = self.uas[self.i % len(self.uas)]
        self.i += 1
        return ua


# --------------------------------------------------------------------------------------------
# Personas
# --------------------------------------------------------------------------------------------

class Personas:
    def __init__(self):
        self.pool = []
        for loc in LOCALES:
            for n in loc["names"]:
                disp, asc = (n if isinstance(n, tuple) else (n, ascii_fold(n)))
                self.pool.append((loc, disp, asc))
        rng.shuffle(self.pool)
        self.used = [0] * len(self.pool)

    def next(self, countries=None):
        """The least-used persona (ties: shuffled order), from the given countries if any."""
        idx = [i for i, (loc, _, _) in enumerate(self.pool) if not countries or loc["country"] in countries]
        if not idx:
            raise ValueError(f"no persona for {countries}")
        i = min(idx, key=lambda j: self.used[j])
        self.used[i] += 1
        loc, disp, asc = self.pool[i]
        a = rng.choice(loc["addresses"])
        n = str(rng.randint(1, 180))
        line1 = a[0].replace("{n}", n)
        address = {"line1": line1}
        if a[1]:
            address["line2"] = a[1].replace("{n}", n)
        address["city"] = a[2]
        if a[3]:
            address["region"] = a[3]
        if a[4]:
            address["postal_code"] = a[4]
        address["country"] = loc["country"]
        return dict(loc=loc, name=disp, ascii=asc, address=address, city_en=a[5],
                    phone=digits_fill(rng.choice(loc["phones"])), email=self.email(asc, loc))

    @staticmethod
    def email(asc, loc):
        parts = [p for p in re.split(r"[\s\-]+", asc) if p]
        first, last = parts[0], parts[-1]
        keep_apostrophe = "'" in last and rng.random() < 0.6
        clean = lambda s: re.sub(r"[^a-z0-9']" if keep_apostrophe else r"[^a-z0-9]", "", s.lower())
        f, l = clean(first), clean(last)
        style = rng.randrange(6)
        local = [f"{f}.{l}", f"{f}{l}{rng.randint(1, 99)}", f"{f[0]}.{l}", f"{l}_{f}",
                 f"{f}+shop", f"{f}.{l}.{rng.randint(1970, 2005)}"][style]
        return f"{local}@{rng.choice(loc['mail'])}"


# --------------------------------------------------------------------------------------------
# Sample construction
# --------------------------------------------------------------------------------------------

class Builder:
    def __init__(self, uas):
        self.uniq = Uniq()
        self.uas = UAPool(uas)
        self.personas = Personas()
        self.samples = []

    def jwt(self, user_id):
        iat = BASE_TS + rng.randint(0, 86400 * 200)
        header = b64url(b'{"alg":"HS256","typ":"JWT"}')
        payload = b64url(compact_json({"sub": user_id, "iat": iat, "exp": iat + 3600,
                                       "scope": "shop", "sid": rand_hex(12)}).encode())
        return f"{header}.{payload}.{b64url(bytes(rng.getrandbits(8) for _ in range(32)))}"

    def cookie(self, persona, logged_in):
        loc = persona["loc"]
        kind = rng.randrange(6)
        if kind == 0:
            return f"PHPSESSID={''.join(rng.choice('abcdefghijklmnopqrstuvwxyz0123456789') for _ in range(26))}; cart={rng.randint(1, 6)}"
        if kind == 1:
            return f"sid={rand_hex(32)}; lang={loc['lang'].split(',')[0]}; currency={loc['currency']}"
        if kind == 2:
            ts = BASE_TS - rng.randint(0, 86400 * 400)
            return f"_ga=GA1.2.{rng.randint(10**8, 10**10)}.{ts}; _gid=GA1.2.{rng.randint(10**8, 10**10)}.{ts + 86400}; cart={rng.randint(0, 4)}"
        if kind == 3:
            a, b = rng.sample(sorted(PRODUCTS.values()), 2)
            return f"consent=necessary%2Canalytics; theme=dark; recently_viewed={a[0]}%2C{b[0]}"
        if kind == 4:
            return f"cart_id={rand_uuid()}; ab_bucket={rng.choice('AB')}; session={b64url(bytes(rng.getrandbits(8) for _ in range(24)))}"
        return f"locale={loc['lang'].split(',')[0].replace('-', '_')}; tz={urllib.parse.quote(rng.choice(['Europe/Berlin', 'Asia/Tokyo', 'America/New_York', 'Asia/Seoul', 'Europe/London']), safe='')}"

    def add(self, category, slug, description, method, path, query="", params=None,
            anonymous=False, referer=None, persona=None, auth=None):
        persona = persona or self.personas.next()
        loc = persona["loc"]
        ua = self.uas.next()
        ip, isp = self.uniq.ip(loc)
        body = ""
        if method in ("POST", "PUT"):
            body = compact_json(params)
        else:
            params = parse_query(query)

        dtype = device_type(ua)
        host = "m.shop.example.com" if dtype == "mobile" else "shop.example.com"
        headers = {"user-agent": ua}
        headers["accept"] = rng.choice(["application/json, text/plain, */*", "application/json",
                                        "*/*", "application/json, text/javascript, */*; q=0.01"])
        headers["accept-language"] = loc["lang"]
        if rng.random() < 0.6:
            headers["accept-encoding"] = rng.choice(["gzip, deflate, br", "gzip, deflate", "gzip, deflate, br, zstd"])
        if body:
            headers["content-type"] = rng.choice(["application/json", "application/json;charset=UTF-8",
                                                  "application/json; charset=utf-8"])
            headers["origin"] = f"https://{host}"
        user_id = None if anonymous else self.uniq.user_id()
        if auth is None:
            auth = "none" if anonymous else rng.choice(["bearer", "bearer", "cookie", "both"])
        if auth in ("bearer", "both"):
            headers["authorization"] = f"Bearer {self.jwt(user_id)}"
        if auth in ("cookie", "both") or (auth == "none" and rng.random() < 0.5):
            headers["cookie"] = self.cookie(persona, auth != "none")
        if referer:
            headers["referer"] = f"https://{host}{referer}"
        if rng.random() < 0.15:
            headers["x-requested-with"] = "XMLHttpRequest"

        name = self.uniq.name(f"{category}-{slug}")
        client = {"ip": ip, "device_id": self.uniq.device_id(), "country": loc["country"],
                  "isp": isp, "device_type": dtype, "user_agent": ua}
        request = {"app": "shop",
                   "request": {"method": method, "path": path, "query": query,
                               "headers": headers, "body": body},
                   "client": client}
        if user_id:
            request["user_id"] = user_id
        request["params"] = params
        self.samples.append({"name": name, "description": description, "kind": "benign",
                             "category": category, "request": request,
                             "expect": {"action": "allow"}})
        return persona


# Content written in a language that is not English is sent by someone from a place where that
# language is spoken. Scripts are recognised; Latin-script languages are listed by slug.
SCRIPT_COUNTRIES = [
    (re.compile(r"[\u3040-\u30ff]"), ["JP"]),
    (re.compile(r"[\uac00-\ud7af]"), ["KR"]),
    (re.compile(r"[\u4e00-\u9fff]"), ["CN", "TW", "HK"]),
    (re.compile(r"[\u0600-\u06ff]"), ["AE", "SA", "EG"]),
    (re.compile(r"[\u0590-\u05ff]"), ["IL"]),
    (re.compile(r"[іїєґІЇЄҐ]"), ["UA"]),
    (re.compile(r"[\u0400-\u04ff]"), ["RU"]),
    (re.compile(r"[\u0370-\u03ff]"), ["GR"]),
    (re.compile(r"[\u0900-\u097f]"), ["IN"]),
    (re.compile(r"[\u0e00-\u0e7f]"), ["TH"]),
    (re.compile(r"[ơưạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹđ]", re.I), ["VN"]),
]
LANG_HINTS = {
    "polish-lodz-souvenirs": ["PL"], "sao-paulo-fc-shirt": ["BR"], "zurich-chocolate": ["CH", "DE"],
    "spanish-girls-shoes": ["ES", "MX", "AR"], "french-creme-brulee-torch": ["FR", "CA"],
    "german-coffee-machine": ["DE", "CH"], "turkish-tea-glasses": ["TR"],
    "lodz-mug-polish": ["PL"], "sao-paulo-shirt-portuguese": ["BR"], "zurich-chocolate-german": ["CH", "DE"],
    "creme-brulee-torch-french": ["FR"], "girls-shoes-spanish": ["ES", "MX", "AR"], "gift-italian": ["IT"],
    "tea-glasses-turkish": ["TR"], "scarf-dutch": ["NL"], "beanie-swedish": ["SE"], "mug-czech": ["CZ"],
    "drop-off-points-lodz": ["PL"], "invoice-vat-german": ["DE"], "delivery-neighbour-french": ["FR"],
    "warranty-spanish": ["ES", "MX", "AR"], "business-invoicing": ["GB"], "update-my-address": ["GB"],
    "change-of-email": ["JP"], "time-to-order-christmas": ["CA"], "wheres-my-order": ["IE"],
    "charged-twice": ["DE", "FR", "IE", "IT", "NL", "ES", "GR", "PT"], "flash-sale-sold-out": ["JP"],
    "call-before": ["GB"], "doorman-portuguese": ["BR"], "neighbour-german": ["DE"],
    "after-six-french": ["FR"], "back-door-text": ["US"], "buzzer-broken": ["GB"],
    "baby-sleeping-turkish": ["TR"], "paczkomat-polish": ["PL"], "portiere-italian": ["IT"],
    "christmas-no-rush": ["GB", "IE", "AU"], "jersey-name-number": ["BR"], "lego-bonsai-gift": ["DE", "CH"],
    "cay-set-turkish": ["TR"], "japanese-snacks-under-1000-yen": ["JP"], "gifts-under-20-dollars": ["US", "CA"],
    "phone-case-five-euro": ["DE", "FR", "IT", "ES", "NL", "IE"], "union-jack-tote": ["GB"],
    "att-prepaid-sim": ["US"], "att-sim-activation": ["US"], "japanese-rice-cooker": ["JP"],
    "chinese-longjing-tea": ["CN"], "tea-chinese": ["CN"], "refund-status-chinese": ["CN"],
    "locker-chinese": ["CN"], "price-drop": ["US"], "vietnamese-ao-dai": ["VN"],
}

SUPPORT_TOPICS = {
    "wheres-my-order": "about a delivery whose tracking stopped updating",
    "update-my-address": "asking to update their address",
    "delete-my-old-card": "asking to delete an expired saved card",
    "alert-me-back-in-stock": "asking for a back-in-stock alert",
    "coupon-not-working": "because a coupon code was refused",
    "charged-twice": "about what looks like a double charge",
    "wrong-size-delivered": "about receiving the wrong size",
    "drop-off-points-lodz": "about drop-off points near a railway station",
    "delivery-date-japanese": "in Japanese, to change a delivery date",
    "refund-status-chinese": "in Chinese, asking about a refund",
    "exchange-korean": "in Korean, to exchange an item for a larger size",
    "order-arabic": "in Arabic, about an order that has not arrived",
    "pickup-point-hebrew": "in Hebrew, asking about a pickup point",
    "return-russian": "in Russian, about returning an item without its box",
    "invoice-vat-german": "in German, asking for an invoice with a VAT number",
    "delivery-neighbour-french": "in French, about a parcel left with a neighbour",
    "warranty-spanish": "in Spanish, about a warranty claim",
    "business-invoicing": "about invoicing for a small business",
    "gift-message-typo": "to fix a typo in a gift message",
    "app-logs-me-out": "because the app keeps logging them out",
    "time-to-order-christmas": "asking for the last order date before Christmas",
    "price-drop": "asking for a price adjustment",
    "missing-part": "about a part missing from a set",
    "accessibility-feedback": "with accessibility feedback about the checkout page",
    "change-of-email": "asking to change their e-mail address",
    "lottery-prize": "about a prize from a live draw",
    "flash-sale-sold-out": "about an item that sold out during checkout in a flash sale",
    "damaged-rug": "about a rug damaged in transit, with a link to photos",
    "close-account": "asking to close their account and delete their data",
    "exchange-vietnamese": "in Vietnamese, to exchange a dress for another size",
    "delivery-thai": "in Thai, about a late delivery",
    "missing-screws": "about missing screws",
}

def countries_for(slug, *texts):
    if slug in LANG_HINTS:
        return LANG_HINTS[slug]
    joined = " ".join(t for t in texts if isinstance(t, str))
    for rx, cs in SCRIPT_COUNTRIES:
        if rx.search(joined):
            return cs
    if "ma-clé" in joined:
        return ["FR"]
    return None


def who(p, anonymous=False):
    if anonymous:
        return rng.choice([f"An anonymous visitor in {p['city_en']}", f"A signed-out shopper in {p['city_en']}",
                           f"A first-time visitor from {p['city_en']}"])
    return rng.choice([f"A shopper in {p['city_en']}", f"A customer in {p['city_en']}",
                       f"A returning customer from {p['city_en']}", f"A signed-in user in {p['city_en']}"])

def ref(path, query=""):
    """Referer path and query; the host (desktop or mobile site) is chosen with the user agent."""
    return path + (("?" + query) if query else "")

def product(key):
    return PRODUCTS[key]


def build_search(b):
    for slug, q, desc in SEARCHES:
        p = b.personas.next(countries_for(slug, q))
        anon = rng.random() < 0.45
        keys = rng.sample(sorted(SEARCH_FILTERS), rng.choice([0, 0, 1, 2, 3, 4]))
        pairs = [("q", q)] + [(k, rng.choice(SEARCH_FILTERS[k])) for k in keys]
        enc = rng.choice(ENCODERS)
        query = build_query(pairs, enc)
        extra = f", with {', '.join(keys)} filters" if keys else ""
        b.add("search", slug, f"{who(p, anon)} searches for {desc}{extra}.", "GET", "/api/search",
              query=query, anonymous=anon, persona=p,
              referer=ref("/search", build_query([("q", q)], enc)) if rng.random() < 0.7 else ref("/"))


def build_product(b):
    for slug, key, query, desc in PRODUCT_VIEWS:
        p = b.personas.next()
        anon = rng.random() < 0.5
        sku, name, _ = product(key)
        b.add("product", slug, f"{who(p, anon)} {desc} for the {name}.", "GET", f"/api/products/{sku}",
              query=query, anonymous=anon, persona=p,
              referer=ref(rng.choice(["/", "/search?q=" + enc_form(name.split(' ')[0]), "/c/new-in", "/wishlist"])))


def build_cart(b):
    for slug, key, qty, options, desc in CART_ITEMS:
        p = b.personas.next(countries_for(slug, json.dumps(options, ensure_ascii=False)))
        sku, name, _ = product(key)
        params = {"sku": sku, "qty": qty}
        if options:
            params["options"] = options
        b.add("cart", slug, f"{who(p)} {desc} ({name}) to the cart.", "POST", "/api/cart",
              params=params, persona=p, referer=ref(f"/p/{sku}"))


def build_order(b):
    keys = sorted(PRODUCTS)
    for slug, note in ORDER_NOTES:
        p = b.personas.next(countries_for(slug, note))
        items = [{"sku": product(k)[0], "qty": rng.choice([1, 1, 1, 2, 3])}
                 for k in rng.sample(keys, rng.choice([1, 1, 2, 3]))]
        address = dict(p["address"])
        address = {"name": p["name"], "phone": p["phone"], **address}
        params = {"items": items, "address": address, "note": note}
        if rng.random() < 0.5:
            params["shipping"] = rng.choice(["standard", "express", "pickup", "economy"])
        if rng.random() < 0.25:
            params["coupon"] = rng.choice(["SPRING-2026", "FREE-SHIP", "WELCOME10"])
        what = "with an empty delivery note" if not note else "with a free-text delivery note"
        count = ["one item", "two items", "three items"][len(items) - 1]
        b.add("order", f"place-{slug}", f"{who(p)} places an order of {count} {what}.",
              "POST", "/api/orders", params=params, persona=p, referer=ref("/checkout/review"))
    for slug, oid, query, desc in ORDER_LOOKUPS:
        p = b.personas.next()
        b.add("order", f"view-{slug}", f"{who(p)} {desc}.", "GET", f"/api/orders/{oid}",
              query=query, persona=p, referer=ref("/account/orders"))


def payment_method(loc):
    c = loc["country"]
    regional = {"JP": ["konbini", "card", "paypay"], "CN": ["alipay", "wechat_pay"], "BR": ["pix", "card", "boleto"],
                "NL": ["ideal", "card"], "PL": ["blik", "card", "p24"], "IN": ["upi", "card", "netbanking"],
                "KR": ["card", "kakao_pay"], "DE": ["card", "paypal", "sofort"], "TH": ["promptpay", "card"]}
    return rng.choice(regional.get(c, ["card", "card", "paypal", "apple_pay", "google_pay"]))


def build_payment(b):
    for i in range(25):
        p = b.personas.next()
        loc = p["loc"]
        cur = loc["currency"]
        usd = sum(product(k)[2] for k in rng.sample(sorted(PRODUCTS), rng.choice([1, 1, 2, 3])))
        amount = money(usd, cur)
        method = payment_method(loc)
        order_id = rng.choice([f"ord-2026-{rng.randint(1000, 99999):06d}", rand_uuid()])
        params = {"order_id": order_id, "amount": amount, "currency": cur, "method": method}
        details = []
        if method == "card":
            params["card_last4"] = rng.choice(["4242", "1881", "0005", "5556", "4444", "1117", "0019", "8431"])
            if rng.random() < 0.4:
                params["billing_name"] = p["name"]
                details.append("a billing name")
            if rng.random() < 0.3:
                params["save_card"] = True
                details.append("save-card set")
            if rng.random() < 0.35:
                params["return_url"] = f"https://shop.example.com/checkout/3ds-return?order={order_id}"
                details.append("a 3-D Secure return URL")
            if cur == "BRL":
                params["installments"] = rng.choice([1, 3, 6, 10])
                details.append("instalments")
        elif method == "upi":
            params["vpa"] = p["ascii"].split()[0].lower() + "@okhdfcbank"
            details.append("a UPI address")
        elif method == "blik":
            params["blik_code"] = digits_fill("######")
            details.append("a BLIK code")
        elif method == "konbini":
            params["store"] = rng.choice(["familymart", "lawson", "seven_eleven"])
            details.append("a convenience store")
        if rng.random() < 0.4:
            params["idempotency_key"] = rand_uuid()
            details.append("an idempotency key")
        sym = CURRENCY_SYMBOL.get(cur, cur + " ")
        extra = f", with {', '.join(details)}" if details else ""
        slug = f"{method.replace('_', '-')}-{cur.lower()}-{slugify(p['city_en'])}"
        b.add("payment", slug, f"{who(p)} pays {sym}{amount} by {method.replace('_', ' ')} for their order{extra}.",
              "POST", "/api/payments", params=params, persona=p, referer=ref("/checkout/payment"))


def build_coupon(b):
    for slug, code, desc in COUPONS:
        p = b.personas.next()
        params = {"coupon": code}
        if rng.random() < 0.3:
            params["cart_id"] = rand_uuid()
        b.add("coupon", slug, f"{who(p)} claims {desc} ({code.strip()}).", "POST", "/api/coupons/claim",
              params=params, persona=p, referer=ref(rng.choice(["/cart", "/checkout", "/promo/spring"])))


def build_lottery(b):
    for slug, event, extra in LOTTERY_EVENTS:
        p = b.personas.next()
        params = {"event_id": event}
        if extra:
            params.update(extra)
        b.add("lottery", slug, f"{who(p)} joins the live-stream prize draw {event}.", "POST", "/api/lottery/draw",
              params=params, persona=p, referer=ref(f"/live/{event}"))


def build_login(b):
    pw = list(PASSWORDS)
    rng.shuffle(pw)
    for i in range(25):
        p = b.personas.next(countries_for("", pw[i]))
        style = rng.randrange(4)
        if style < 2:
            username, how = p["email"], "their e-mail address"
        elif style == 2:
            username, how = slugify(p["ascii"]).replace("-", "_") + str(rng.randint(1, 999)), "a user name"
        else:
            username, how = p["phone"], "their phone number"
        params = {"username": username, "password": pw[i]}
        if rng.random() < 0.4:
            params["remember_me"] = True
        slug = f"{slugify(p['ascii'])}-{['email', 'email', 'handle', 'phone'][style]}"
        b.add("login", slug, f"{who(p).replace('A signed-in user', 'A user')} logs in with {how} and a password containing symbols or non-ASCII text.",
              "POST", "/api/login", params=params, persona=p, auth=rng.choice(["none", "cookie"]),
              referer=ref("/login", "next=%2Faccount"))


def build_review(b):
    for slug, key, rating, title, text in REVIEWS:
        p = b.personas.next(countries_for(slug, title, text))
        sku, name, _ = product(key)
        params = {"product_id": sku, "rating": rating, "title": title, "text": text}
        lines = "a multi-line" if "\n" in text else "a"
        b.add("review", slug, f"{who(p)} posts {lines} {rating}-star review of the {name}.", "POST", "/api/reviews",
              params=params, persona=p, referer=ref(f"/p/{sku}/reviews/new"))


def build_profile(b):
    dn = list(DISPLAY_NAMES)
    rng.shuffle(dn)
    for i in range(30):
        p = b.personas.next()
        params = {"name": p["name"], "email": p["email"], "phone": p["phone"], "address": p["address"]}
        extras = []
        if i < len(dn) and rng.random() < 0.6:
            params["display_name"] = dn[i]
            extras.append("a display name")
        if rng.random() < 0.3:
            params["newsletter"] = rng.choice([True, False])
            extras.append("a newsletter preference")
        if rng.random() < 0.2:
            params["birthday"] = f"{rng.randint(1950, 2005)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            extras.append("a birthday")
        extra = f" and sets {', '.join(extras)}" if extras else ""
        b.add("profile", f"{slugify(p['ascii'])}-{p['loc']['country'].lower()}",
              f"{who(p)} updates their name, e-mail, phone and address{extra}.",
              "PUT", "/api/profile", params=params, persona=p, referer=ref("/account/profile"))


def build_flash(b):
    ids = list(FLASH_SALES)
    for i, fid in enumerate(ids):
        p = b.personas.next()
        if i % 2 == 0 and i // 2 < len(FLASH_GET_QUERIES):
            q = FLASH_GET_QUERIES[i // 2]
            anon = rng.random() < 0.3
            b.add("flash-sale", f"view-{fid[8:]}", f"{who(p, anon)} opens the flash sale page {fid} before it starts.",
                  "GET", f"/api/flash-sale/{fid}", query=q, anonymous=anon, persona=p, referer=ref("/deals"))
        else:
            key = rng.choice(sorted(PRODUCTS))
            sku, name, _ = product(key)
            b.add("flash-sale", f"buy-{fid[8:]}", f"{who(p)} buys one {name} in the flash sale {fid}.",
                  "POST", f"/api/flash-sale/{fid}/buy", params={"sku": sku, "qty": 1}, persona=p,
                  referer=ref(f"/deals/{fid}"))


def build_support(b):
    for slug, subject, message, oid in SUPPORT:
        p = b.personas.next(countries_for(slug, subject, message))
        params = {"subject": subject, "message": message}
        if oid:
            params["order_id"] = oid
        b.add("support", slug, f"{who(p)} writes to support {SUPPORT_TOPICS[slug]}{' (with the order id)' if oid else ''}.",
              "POST", "/api/support/tickets", params=params, persona=p, referer=ref("/help/contact"))


def build_account(b):
    for slug, q, desc in ACCOUNT_QUERIES:
        p = b.personas.next()
        b.add("account", slug, f"{who(p)} {desc}.", "GET", "/api/account", query=q, persona=p,
              referer=ref("/account"))


def check(samples, uas):
    """Invariants every sample must hold; a failure stops the run before anything is written."""
    seen = {"ip": set(), "device": set(), "user": set()}
    for s in samples:
        r, rq, c = s["request"], s["request"]["request"], s["request"]["client"]
        where = s["name"]
        if rq["method"] in ("POST", "PUT"):
            assert rq["body"] == compact_json(r["params"]), where
            assert "user_id" in r and "content-type" in rq["headers"], where
        else:
            assert rq["body"] == "" and parse_query(rq["query"]) == r["params"], where
            assert not re.search(r"[ \"<>]", rq["query"]), where
        h = rq["headers"]
        assert all(k == k.lower() for k in h), where
        assert not {"x-timestamp", "x-nonce", "x-signature"} & set(h), where
        assert h["user-agent"] == c["user_agent"] and c["user_agent"] in uas, where
        ip = ipaddress.ip_address(c["ip"])
        assert ip.is_global and not any(ip in n for n in FORBIDDEN_NETS if n.version == ip.version), where
        for k, v in (("ip", c["ip"]), ("device", c["device_id"]), ("user", r.get("user_id"))):
            if v is not None:
                assert v not in seen[k], f"{where}: duplicate {k} {v}"
                seen[k].add(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--user-agents", default=os.environ.get("RAMPART_UA_FILE", DEFAULT_UA))
    ap.add_argument("--scanner-agents", default=os.environ.get("RAMPART_SCANNER_UA_FILE", DEFAULT_SCANNER_UA))
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()

    uas = load_user_agents(args.user_agents, args.scanner_agents)
    if len(uas) < 50:
        sys.exit(f"only {len(uas)} usable browser user agents in {args.user_agents}")
    b = Builder(uas)
    for fn in (build_search, build_product, build_cart, build_order, build_payment, build_coupon,
               build_lottery, build_login, build_review, build_profile, build_flash, build_support,
               build_account):
        fn(b)

    for cat in CATEGORIES:
        d = os.path.join(args.out, cat)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            if f.endswith(".json"):
                os.remove(os.path.join(d, f))
    check(b.samples, uas)
    counts = {}
    for s in b.samples:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", s["name"]), s["name"]
        path = os.path.join(args.out, s["category"], s["name"] + ".json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(s, ensure_ascii=False, indent=2) + "\n")
        counts[s["category"]] = counts.get(s["category"], 0) + 1
    for cat in CATEGORIES:
        print(f"{cat:12} {counts.get(cat, 0)}")
    print(f"{'total':12} {len(b.samples)}  ({len(set(s['request']['client']['user_agent'] for s in b.samples))} distinct user agents)")


if __name__ == "__main__":
    main()
