"""A multilingual retrieval set of our own making, for recall search in any language.

    build(agents=10, seed=1, languages=LANGUAGES)   the members, their past and their questions
    LANGUAGES                                      en (the English subset), de, es, ru, ja, zh

How it was made: every sentence below was written for this repository (no third-party
data, nothing translated by a machine or copied from a corpus). For each language there
is the same set of eight facts a member tells their companion (their cat's name, where
their sister moved, a friend's wedding, an allergy, their job, a trip, an order number, a
work message mixing in English words), two near misses per fact (the same words about
something else: a neighbour's dog, a colleague's allergy), thirty everyday lines and a
dozen replies of the companion. A member's past is their eight facts, with slot values
drawn for them (names, cities, countries, foods, jobs), the sixteen near misses and the
everyday lines, shuffled, each followed by a reply: 108 messages. Each fact is asked about
two or three ways:

    name      the name or number alone, as it appears inside the fact's sentence ("ミソ" in
              "うちの猫の名前はミソで…"), in another case (Russian "Мурка" for "Муркой"),
              without its accent (Spanish "Tomas" for "Tomás") or half-width for full-width
              (Japanese "BX-2291" for "ＢＸ－２２９１")
    question  a question in the member's words, sharing few words with the fact
    keyword   a few key words, in other inflected forms than the fact's where the language
              inflects (German "Schwester studiert" for "um zu studieren", Russian
              "сестра переехала Самара" for "в Самару"), English words inside mixed messages

The English subset is built from the same facts and slots, so the languages can be compared
with it. Everything is drawn from one seeded random generator: the same set on every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

KINDS = ("pet", "sister", "wedding", "allergy", "job", "trip", "order", "mixed")


@dataclass(frozen=True)
class Query:
    text: str
    kind: str  # name, question or keyword
    fact: str  # which of KINDS it asks about
    gold: int  # the index of the fact's message in the agent's messages


@dataclass
class Agent:
    language: str
    member: str
    messages: list[tuple[str, str]] = field(default_factory=list)  # (role, text)
    queries: list[Query] = field(default_factory=list)


# Each fact: the member's sentence, and the queries (kind, text) about it. Slots are filled
# with str.format; a slot with forms is a dict ("{pet[ins]}": Russian instrumental).
FACTS: dict[str, dict[str, tuple[str, list[tuple[str, str]]]]] = {
    "en": {
        "pet": (
            "My cat is called {pet}, and she wakes me up at five every morning.",
            [
                ("name", "{pet}"),
                ("question", "What is my cat's name?"),
                ("keyword", "cats waking early"),
            ],
        ),
        "sister": (
            "My sister {sis} moved to {city} last year to study medicine.",
            [
                ("name", "{sis}"),
                ("question", "Where does my sister live now?"),
                ("keyword", "sister studying medicine"),
            ],
        ),
        "wedding": (
            "My friend {fr} is getting married in {wcity} in September, and I'm the best man.",
            [
                ("name", "{fr}"),
                ("question", "Who is getting married in September?"),
                ("keyword", "wedding best man"),
            ],
        ),
        "allergy": (
            "I'm allergic to {alg[pl]}, so I always read the labels.",
            [("question", "What am I allergic to?"), ("keyword", "{alg[sg]} allergy")],
        ),
        "job": (
            "I've been working as {job[s]} for six years now.",
            [("question", "What do I do for a living?"), ("keyword", "{job[k]}")],
        ),
        "trip": (
            "In {month} we're flying to {country} for two weeks, I can't wait.",
            [("question", "Where are we going on holiday?"), ("keyword", "flight {country} weeks")],
        ),
        "order": (
            "The order number for the new sofa is {ord}, it should arrive next week.",
            [
                ("name", "{ord}"),
                ("question", "What's the number of the sofa order?"),
                ("keyword", "sofa ordered"),
            ],
        ),
        "mixed": (
            "The client meeting moved to Thursday, so I have to finish the slides by Wednesday.",
            [
                ("question", "When do I have to finish the slides?"),
                ("keyword", "meetings slide deadline"),
            ],
        ),
    },
    "de": {
        "pet": (
            "Meine Katze heißt {pet} und weckt mich jeden Morgen um fünf.",
            [
                ("name", "{pet}"),
                ("question", "Wie heißt meine Katze?"),
                ("keyword", "Katzen wecken morgens"),
            ],
        ),
        "sister": (
            "Meine Schwester {sis} ist letztes Jahr nach {city} gezogen, um dort Medizin zu "
            "studieren.",
            [
                ("name", "{sis}"),
                ("question", "Wo wohnt meine Schwester jetzt?"),
                ("keyword", "Schwester studiert Medizin"),
            ],
        ),
        "wedding": (
            "Mein Freund {fr} heiratet im September in {wcity}, und ich bin sein Trauzeuge.",
            [
                ("name", "{fr}"),
                ("question", "Wer heiratet im September?"),
                ("keyword", "Hochzeit Trauzeugen"),
            ],
        ),
        "allergy": (
            "Ich bin allergisch gegen {alg[pl]}, deshalb lese ich immer die Zutatenliste.",
            [("question", "Wogegen bin ich allergisch?"), ("keyword", "{alg[sg]} Allergie")],
        ),
        "job": (
            "Ich arbeite jetzt seit sechs Jahren als {job[s]}.",
            [("question", "Was mache ich beruflich?"), ("keyword", "{job[k]}")],
        ),
        "trip": (
            "Im {month} fliegen wir für zwei Wochen nach {country}, ich freue mich so.",
            [("question", "Wohin geht unser Urlaub?"), ("keyword", "Flug {country} Woche")],
        ),
        "order": (
            "Die Bestellnummer für das neue Sofa ist {ord}, geliefert wird nächste Woche.",
            [
                ("name", "{ord}"),
                ("question", "Welche Nummer hat die Bestellung des Sofas?"),
                ("keyword", "Sofas bestellt"),
            ],
        ),
        "mixed": (
            "Das Meeting mit dem Kunden ist auf Donnerstag verschoben, also muss ich die "
            "Slides bis Mittwoch fertig machen.",
            [
                ("question", "Bis wann müssen die Slides fertig sein?"),
                ("keyword", "meeting slides Kunden"),
            ],
        ),
    },
    "es": {
        "pet": (
            "Mi gata se llama {pet} y me despierta todas las mañanas a las cinco.",
            [
                ("name", "{pet}"),
                ("question", "¿Cómo se llama mi gata?"),
                ("keyword", "gatas despiertan mañana"),
            ],
        ),
        "sister": (
            "Mi hermana {sis} se mudó a {city} el año pasado para estudiar medicina.",
            [
                ("name", "{sis}"),
                ("question", "¿Dónde vive ahora mi hermana?"),
                ("keyword", "hermana estudia medicina"),
            ],
        ),
        "wedding": (
            "Mi amigo {fr[s]} se casa en septiembre en {wcity} y yo soy el padrino.",
            [
                ("name", "{fr[plain]}"),
                ("question", "¿Quién se casa en septiembre?"),
                ("keyword", "boda padrinos casarse"),
            ],
        ),
        "allergy": (
            "Soy alérgico a {alg[pl]}, así que siempre leo las etiquetas.",
            [("question", "¿A qué soy alérgico?"), ("keyword", "alergia {alg[sg]}")],
        ),
        "job": (
            "Llevo seis años trabajando como {job[s]}.",
            [("question", "¿En qué trabajo?"), ("keyword", "{job[k]}")],
        ),
        "trip": (
            "En {month} nos vamos dos semanas a {country}, ¡qué ganas tengo!",
            [
                ("question", "¿Adónde nos vamos de vacaciones?"),
                ("keyword", "viaje {country} semana"),
            ],
        ),
        "order": (
            "El número de pedido del sofá nuevo es {ord}; lo traen la semana que viene.",
            [
                ("name", "{ord}"),
                ("question", "¿Cuál es el número del pedido del sofá?"),
                ("keyword", "sofa pedidos"),
            ],
        ),
        "mixed": (
            "Movieron la meeting con el cliente al jueves, así que tengo que terminar las "
            "slides antes del miércoles.",
            [
                ("question", "¿Para cuándo tengo que terminar las slides?"),
                ("keyword", "meeting slides clientes"),
            ],
        ),
    },
    "ru": {
        "pet": (
            "Я завела кошку и назвала её {pet[ins]}: теперь она будит меня каждое утро в пять.",
            [
                ("name", "{pet[nom]}"),
                ("question", "Как зовут мою кошку?"),
                ("keyword", "кошка будит утром"),
            ],
        ),
        "sister": (
            "В прошлом году я помогала сестре {sis[dat]} с переездом в {city[acc]}: она там "
            "учится на врача.",
            [
                ("name", "{sis[nom]}"),
                ("question", "Где теперь живёт моя сестра?"),
                ("keyword", "сестра переехала {city[nom]}"),
            ],
        ),
        "wedding": (
            "В сентябре в {wcity[prep]} свадьба у моего друга {fr[gen]}, я буду свидетелем.",
            [
                ("name", "{fr[nom]}"),
                ("question", "Кто женится в сентябре?"),
                ("keyword", "свидетель свадьбы"),
            ],
        ),
        "allergy": (
            "У меня аллергия на {alg[acc]}, поэтому я всегда читаю состав.",
            [("question", "На что у меня аллергия?"), ("keyword", "{alg[nom]} аллергией")],
        ),
        "job": (
            "Я уже шесть лет работаю {job[s]}.",
            [("question", "Кем я работаю?"), ("keyword", "{job[k]}")],
        ),
        "trip": (
            "В {month[prep]} мы летим в {country[acc]} на две недели, очень жду.",
            [("question", "Куда мы летим в отпуск?"), ("keyword", "поездка {country[nom]}")],
        ),
        "order": (
            "Номер заказа на новый диван — {ord}, привезут на следующей неделе.",
            [
                ("name", "{ord}"),
                ("question", "Какой номер у заказа дивана?"),
                ("keyword", "заказ диваны"),
            ],
        ),
        "mixed": (
            "Meeting с клиентом перенесли на четверг, так что слайды надо доделать до среды.",
            [
                ("question", "До какого дня надо доделать слайды?"),
                ("keyword", "meeting слайдов клиента"),
            ],
        ),
    },
    "ja": {
        "pet": (
            "うちの猫の名前は{pet}で、毎朝五時に起こされます。",
            [
                ("name", "{pet}"),
                ("question", "猫の名前は何ですか？"),
                ("keyword", "毎朝 猫 起こす"),
            ],
        ),
        "sister": (
            "妹の{sis}は去年、医学を勉強するために{city}へ引っ越しました。",
            [
                ("name", "{sis}"),
                ("question", "妹は今どこに住んでいますか？"),
                ("keyword", "妹 医学 勉強"),
            ],
        ),
        "wedding": (
            "友達の{fr}が九月に{wcity}で結婚するので、スピーチを頼まれました。",
            [
                ("name", "{fr}"),
                ("question", "九月に結婚するのは誰ですか？"),
                ("keyword", "結婚式 スピーチ"),
            ],
        ),
        "allergy": (
            "{alg}アレルギーなので、いつも成分表示を見ています。",
            [("question", "私は何のアレルギーがありますか？"), ("keyword", "{alg} アレルギー")],
        ),
        "job": (
            "六年前から{job[s]}。",
            [("question", "私の仕事は何ですか？"), ("keyword", "{job[k]}")],
        ),
        "trip": (
            "{month}に二週間{country}へ行きます。楽しみ！",
            [("question", "休みにどこへ行きますか？"), ("keyword", "{country} 旅行")],
        ),
        "order": (
            "新しいソファの注文番号は{ord[fw]}で、来週届く予定です。",
            [
                ("name", "{ord[hw]}"),
                ("question", "ソファの注文番号は何番？"),
                ("keyword", "ソファ 注文"),
            ],
        ),
        "mixed": (
            "クライアントとのmeetingが木曜日に変わったので、水曜日までにslidesを仕上げないといけない。",
            [("question", "slidesはいつまでに仕上げる？"), ("keyword", "meeting 木曜日")],
        ),
    },
    "zh": {
        "pet": (
            "我的猫叫{pet}，它每天早上五点就把我叫醒。",
            [("name", "{pet}"), ("question", "我的猫叫什么名字？"), ("keyword", "猫 早上 叫醒")],
        ),
        "sister": (
            "我妹妹{sis}去年搬到{city}去读医学了。",
            [("name", "{sis}"), ("question", "我妹妹现在住在哪里？"), ("keyword", "妹妹 学医")],
        ),
        "wedding": (
            "我朋友{fr}九月要在{wcity}结婚，他请我当伴郎。",
            [("name", "{fr}"), ("question", "谁九月要结婚？"), ("keyword", "婚礼 伴郎")],
        ),
        "allergy": (
            "我对{alg}过敏，所以买东西总要看配料表。",
            [("question", "我对什么过敏？"), ("keyword", "{alg} 过敏")],
        ),
        "job": (
            "我在{job[s]}已经六年了。",
            [("question", "我是做什么工作的？"), ("keyword", "{job[k]}")],
        ),
        "trip": (
            "{month}我们要去{country}玩两个星期，好期待！",
            [("question", "我们放假去哪儿？"), ("keyword", "{country} 旅行")],
        ),
        "order": (
            "新沙发的订单号是{ord}，下周送到。",
            [("name", "{ord}"), ("question", "沙发的订单号是多少？"), ("keyword", "沙发 订单")],
        ),
        "mixed": (
            "跟客户的meeting改到周四了，我得在周三之前把slides做完。",
            [("question", "slides要在什么时候之前做完？"), ("keyword", "meeting 周四")],
        ),
    },
}

# Five values per slot and language. Russian values carry the cases the sentences use.
SLOTS: dict[str, dict[str, list[Any]]] = {
    "en": {
        "pet": ["Biscuit", "Pepper", "Luna", "Mochi", "Clover"],
        "sis": ["Hannah", "Chloe", "Megan", "Grace", "Abby"],
        "city": ["Leeds", "Boston", "Denver", "Glasgow", "Austin"],
        "fr": ["Tom", "Marcus", "Ethan", "Liam", "Owen"],
        "wcity": ["Bristol", "Dublin", "Chicago", "York", "Seattle"],
        "alg": [
            {"pl": "peanuts", "sg": "peanut"},
            {"pl": "walnuts", "sg": "walnut"},
            {"pl": "strawberries", "sg": "strawberry"},
            {"pl": "prawns", "sg": "prawn"},
            {"pl": "sesame seeds", "sg": "sesame seed"},
        ],
        "job": [
            {"s": "a nurse at the city hospital", "k": "nursing hospitals"},
            {"s": "a teacher at a primary school", "k": "teachers schools"},
            {"s": "a baker in a small bakery", "k": "bakers bakeries"},
            {"s": "a bus driver for the city", "k": "drivers buses"},
            {"s": "a vet at an animal clinic", "k": "vets clinics animals"},
        ],
        "month": ["June", "July", "August", "May", "October"],
        "country": ["Portugal", "Italy", "Greece", "Norway", "Japan"],
    },
    "de": {
        "pet": ["Krümel", "Flocke", "Mieze", "Pünktchen", "Socke"],
        "sis": ["Lena", "Anke", "Jana", "Miriam", "Katrin"],
        "city": ["Hamburg", "Leipzig", "Freiburg", "Münster", "Kiel"],
        "fr": ["Jonas", "Felix", "Tobias", "Lukas", "Matthias"],
        "wcity": ["Dresden", "Bremen", "Köln", "Rostock", "Mainz"],
        "alg": [
            {"pl": "Erdnüsse", "sg": "Erdnuss"},
            {"pl": "Walnüsse", "sg": "Walnuss"},
            {"pl": "Erdbeeren", "sg": "Erdbeere"},
            {"pl": "Garnelen", "sg": "Garnele"},
            {"pl": "Sesamkörner", "sg": "Sesam"},
        ],
        "job": [
            {
                "s": "Krankenpflegerin im Krankenhaus der Stadt",
                "k": "Krankenpflegerinnen Krankenhäuser",
            },
            {"s": "Lehrerin an einer Grundschule", "k": "Lehrerinnen Grundschulen"},
            {"s": "Bäcker in einer kleinen Bäckerei", "k": "Bäckers Bäckereien"},
            {"s": "Busfahrer bei der Stadt", "k": "Busfahrern Stadt"},
            {"s": "Tierärztin in einer Praxis auf dem Land", "k": "Tierärztinnen Praxen"},
        ],
        "month": ["Juni", "Juli", "August", "Mai", "Oktober"],
        "country": ["Portugal", "Italien", "Griechenland", "Norwegen", "Japan"],
    },
    "es": {
        "pet": ["Canela", "Pelusa", "Nieve", "Lola", "Chispa"],
        "sis": ["Lucía", "Marta", "Inés", "Elena", "Carmen"],
        "city": ["Sevilla", "Valencia", "Bilbao", "Granada", "Málaga"],
        "fr": [
            {"s": "Tomás", "plain": "Tomas"},
            {"s": "Andrés", "plain": "Andres"},
            {"s": "Martín", "plain": "Martin"},
            {"s": "Rubén", "plain": "Ruben"},
            {"s": "Joaquín", "plain": "Joaquin"},
        ],
        "wcity": ["Córdoba", "Toledo", "Cádiz", "Zaragoza", "Santander"],
        "alg": [
            {"pl": "los cacahuetes", "sg": "cacahuete"},
            {"pl": "las nueces", "sg": "nuez"},
            {"pl": "las fresas", "sg": "fresa"},
            {"pl": "las gambas", "sg": "gamba"},
            {"pl": "las semillas de sésamo", "sg": "sesamo"},
        ],
        "job": [
            {"s": "enfermero en el hospital de la ciudad", "k": "enfermeros hospitales"},
            {"s": "maestro en una escuela primaria", "k": "maestros escuelas"},
            {"s": "panadero en una panadería pequeña", "k": "panaderos panaderias"},
            {"s": "conductor de autobús para el ayuntamiento", "k": "conductores autobuses"},
            {"s": "veterinario en una clínica de animales", "k": "veterinarios clinicas"},
        ],
        "month": ["junio", "julio", "agosto", "mayo", "octubre"],
        "country": ["Portugal", "Italia", "Grecia", "Noruega", "Japón"],
    },
    "ru": {
        "pet": [
            {"nom": "Мурка", "ins": "Муркой"},
            {"nom": "Дуся", "ins": "Дусей"},
            {"nom": "Ночка", "ins": "Ночкой"},
            {"nom": "Маруся", "ins": "Марусей"},
            {"nom": "Буся", "ins": "Бусей"},
        ],
        "sis": [
            {"nom": "Лена", "dat": "Лене"},
            {"nom": "Катя", "dat": "Кате"},
            {"nom": "Оля", "dat": "Оле"},
            {"nom": "Даша", "dat": "Даше"},
            {"nom": "Настя", "dat": "Насте"},
        ],
        "city": [
            {"nom": "Самара", "acc": "Самару"},
            {"nom": "Уфа", "acc": "Уфу"},
            {"nom": "Вологда", "acc": "Вологду"},
            {"nom": "Тула", "acc": "Тулу"},
            {"nom": "Казань", "acc": "Казань"},
        ],
        "fr": [
            {"nom": "Антон", "gen": "Антона"},
            {"nom": "Игорь", "gen": "Игоря"},
            {"nom": "Максим", "gen": "Максима"},
            {"nom": "Денис", "gen": "Дениса"},
            {"nom": "Павел", "gen": "Павла"},
        ],
        "wcity": [
            {"nom": "Пермь", "prep": "Перми"},
            {"nom": "Тверь", "prep": "Твери"},
            {"nom": "Омск", "prep": "Омске"},
            {"nom": "Калуга", "prep": "Калуге"},
            {"nom": "Ярославль", "prep": "Ярославле"},
        ],
        "alg": [
            {"acc": "клубнику", "nom": "клубника"},
            {"acc": "арахис", "nom": "арахис"},
            {"acc": "рыбу", "nom": "рыба"},
            {"acc": "креветки", "nom": "креветка"},
            {"acc": "горчицу", "nom": "горчица"},
        ],
        "job": [
            {"s": "медсестрой в городской больнице", "k": "медсестра больница"},
            {"s": "учительницей в начальной школе", "k": "учительница школа"},
            {"s": "пекарем в маленькой пекарне", "k": "пекарь пекарня"},
            {"s": "водителем автобуса", "k": "водитель автобусы"},
            {"s": "ветеринаром в клинике для животных", "k": "ветеринар клиника"},
        ],
        "month": [
            {"prep": "июне"},
            {"prep": "июле"},
            {"prep": "августе"},
            {"prep": "мае"},
            {"prep": "октябре"},
        ],
        "country": [
            {"nom": "Португалия", "acc": "Португалию"},
            {"nom": "Италия", "acc": "Италию"},
            {"nom": "Греция", "acc": "Грецию"},
            {"nom": "Норвегия", "acc": "Норвегию"},
            {"nom": "Япония", "acc": "Японию"},
        ],
    },
    "ja": {
        "pet": ["ミソ", "モカ", "こはく", "タマ", "きなこ"],
        "sis": ["美咲", "由美", "さくら", "彩花", "真央"],
        "city": ["札幌", "福岡", "仙台", "金沢", "神戸"],
        "fr": ["健太", "翔太", "大輔", "拓也", "直樹"],
        "wcity": ["京都", "横浜", "広島", "長崎", "松本"],
        "alg": ["ピーナッツ", "くるみ", "いちご", "えび", "ごま"],
        "job": [
            {"s": "市立病院で看護師をしています", "k": "看護師 病院"},
            {"s": "小学校で先生をしています", "k": "小学校 先生"},
            {"s": "小さなパン屋でパンを焼いています", "k": "パン屋 仕事"},
            {"s": "市バスの運転手をしています", "k": "バス 運転手"},
            {"s": "動物病院で獣医をしています", "k": "獣医 動物"},
        ],
        "month": ["六月", "七月", "八月", "五月", "十月"],
        "country": ["ポルトガル", "イタリア", "ギリシャ", "ノルウェー", "ベトナム"],
    },
    "zh": {
        "pet": ["咪咪", "豆豆", "花花", "团子", "糖糖"],
        "sis": ["小雨", "晓婷", "佳佳", "丽娜", "思思"],
        "city": ["成都", "杭州", "西安", "厦门", "昆明"],
        "fr": ["王磊", "李强", "张伟", "刘洋", "陈杰"],
        "wcity": ["南京", "青岛", "大连", "苏州", "桂林"],
        "alg": ["花生", "核桃", "草莓", "虾", "芝麻"],
        "job": [
            {"s": "市医院当护士", "k": "护士 医院"},
            {"s": "一所小学当老师", "k": "小学 老师"},
            {"s": "一家小面包店做面包", "k": "面包店 工作"},
            {"s": "公交公司开公交车", "k": "公交车 司机"},
            {"s": "宠物医院当兽医", "k": "兽医 动物"},
        ],
        "month": ["六月", "七月", "八月", "五月", "十月"],
        "country": ["葡萄牙", "意大利", "希腊", "挪威", "日本"],
    },
}

# Two near misses per fact: its words, about something else.
NEAR_MISSES: dict[str, dict[str, tuple[str, str]]] = {
    "en": {
        "pet": (
            "My neighbour's dog barks every morning at six.",
            "I saw a ginger cat sleeping on a car at the station.",
        ),
        "sister": (
            "My brother still lives with our parents.",
            "A friend of mine is studying law in London.",
        ),
        "wedding": (
            "We watched a wedding film last night, it was terrible.",
            "My cousin got divorced last spring.",
        ),
        "allergy": (
            "My colleague is allergic to cats.",
            "Spring is hard for everyone with hay fever.",
        ),
        "job": (
            "My mother was a teacher for thirty years.",
            "The hospital car park is always full.",
        ),
        "trip": ("I would love to see Japan one day.", "Flights are so expensive in the summer."),
        "order": (
            "The old sofa is going to my brother.",
            "I ordered a lamp online but it arrived broken.",
        ),
        "mixed": ("I hate meetings on Monday mornings.", "My boss loves long presentations."),
    },
    "de": {
        "pet": (
            "Der Hund der Nachbarn bellt jeden Morgen um sechs.",
            "Am Bahnhof habe ich eine rote Katze auf einem Auto schlafen sehen.",
        ),
        "sister": (
            "Mein Bruder wohnt immer noch bei unseren Eltern.",
            "Ein Freund von mir studiert Jura in Berlin.",
        ),
        "wedding": (
            "Gestern Abend haben wir einen Hochzeitsfilm gesehen, furchtbar.",
            "Mein Cousin hat sich letzten Frühling scheiden lassen.",
        ),
        "allergy": (
            "Meine Kollegin ist allergisch gegen Katzen.",
            "Der Frühling ist schlimm für alle mit Heuschnupfen.",
        ),
        "job": (
            "Meine Mutter war dreißig Jahre lang Lehrerin.",
            "Der Parkplatz am Krankenhaus ist immer voll.",
        ),
        "trip": ("Ich würde so gern einmal nach Japan reisen.", "Flüge sind im Sommer so teuer."),
        "order": (
            "Das alte Sofa bekommt mein Bruder.",
            "Ich habe online eine Lampe bestellt, aber sie kam kaputt an.",
        ),
        "mixed": ("Ich hasse Meetings am Montagmorgen.", "Mein Chef liebt lange Präsentationen."),
    },
    "es": {
        "pet": (
            "El perro del vecino ladra todas las mañanas a las seis.",
            "En la estación vi un gato naranja durmiendo encima de un coche.",
        ),
        "sister": (
            "Mi hermano todavía vive con nuestros padres.",
            "Un amigo mío estudia derecho en Madrid.",
        ),
        "wedding": (
            "Anoche vimos una película de bodas y era malísima.",
            "Mi primo se divorció la primavera pasada.",
        ),
        "allergy": (
            "Mi compañera es alérgica a los gatos.",
            "La primavera es dura para todos los que tienen alergia al polen.",
        ),
        "job": (
            "Mi madre fue maestra durante treinta años.",
            "El aparcamiento del hospital siempre está lleno.",
        ),
        "trip": ("Me encantaría conocer Japón algún día.", "Los vuelos son carísimos en verano."),
        "order": (
            "El sofá viejo se lo queda mi hermano.",
            "Pedí una lámpara por internet pero llegó rota.",
        ),
        "mixed": (
            "Odio las reuniones de los lunes por la mañana.",
            "A mi jefe le encantan las presentaciones largas.",
        ),
    },
    "ru": {
        "pet": (
            "Собака соседей лает каждое утро в шесть.",
            "На вокзале видела рыжего кота, он спал на машине.",
        ),
        "sister": (
            "Мой брат до сих пор живёт с родителями.",
            "Мой друг учится на юриста в Москве.",
        ),
        "wedding": (
            "Вчера смотрели фильм про свадьбу, ужасный.",
            "Мой двоюродный брат развёлся прошлой весной.",
        ),
        "allergy": (
            "У моей коллеги аллергия на кошек.",
            "Весной всем, у кого поллиноз, очень тяжело.",
        ),
        "job": (
            "Моя мама тридцать лет проработала учительницей.",
            "У больницы парковка всегда забита.",
        ),
        "trip": (
            "Очень хочу когда-нибудь побывать в Японии.",
            "Летом билеты на самолёт такие дорогие.",
        ),
        "order": (
            "Старый диван заберёт мой брат.",
            "Заказала лампу в интернете, а она пришла разбитой.",
        ),
        "mixed": (
            "Ненавижу совещания в понедельник утром.",
            "Мой начальник обожает длинные презентации.",
        ),
    },
    "ja": {
        "pet": ("隣の家の犬が毎朝六時に吠えます。", "駅で茶色の猫が車の上で寝ているのを見ました。"),
        "sister": ("兄はまだ両親と一緒に住んでいます。", "友達が東京で法律を勉強しています。"),
        "wedding": (
            "昨日の夜、結婚の映画を見たけど、ひどかった。",
            "いとこが去年の春に離婚しました。",
        ),
        "allergy": ("同僚は猫アレルギーです。", "花粉症の人には春がつらいですね。"),
        "job": ("母は三十年間先生をしていました。", "病院の駐車場はいつも満車です。"),
        "trip": ("いつか日本中を旅行してみたいです。", "夏は飛行機のチケットが高すぎます。"),
        "order": (
            "古いソファは兄が持っていきます。",
            "ネットでランプを注文したら、壊れて届きました。",
        ),
        "mixed": ("月曜の朝の会議が大嫌いです。", "上司は長いプレゼンが大好きです。"),
    },
    "zh": {
        "pet": ("邻居家的狗每天早上六点就叫。", "我在车站看见一只橘猫睡在汽车上。"),
        "sister": ("我哥哥还跟父母住在一起。", "我一个朋友在北京读法律。"),
        "wedding": ("昨晚看了一部关于婚礼的电影，太难看了。", "我表哥去年春天离婚了。"),
        "allergy": ("我同事对猫过敏。", "春天对有花粉症的人来说很难熬。"),
        "job": ("我妈妈当了三十年老师。", "医院的停车场总是满的。"),
        "trip": ("我真想有一天去看看日本。", "夏天的机票太贵了。"),
        "order": ("旧沙发给我哥哥了。", "我在网上买了一盏台灯，结果送来就是坏的。"),
        "mixed": ("我最讨厌周一早上开会。", "我老板特别喜欢很长的演示。"),
    },
}

EVERYDAY: dict[str, list[str]] = {
    "en": [
        "Good morning! I slept really badly.",
        "I'm so tired today.",
        "It rained all day here.",
        "I made pasta for dinner.",
        "Did you watch the game yesterday?",
        "I finally cleaned the kitchen.",
        "Work was busy again.",
        "I went for a long walk in the park.",
        "I can't decide what to read next.",
        "The bus was late again.",
        "I'm thinking of learning to bake bread.",
        "My phone battery dies so fast.",
        "We had a barbecue with friends on Saturday.",
        "Coffee first, then everything else.",
        "I really need a holiday.",
        "The weekend went by far too fast.",
        "I bought new running shoes.",
        "It's been such a long week.",
        "My tomatoes are finally turning red.",
        "I fixed the bike's flat tyre myself.",
        "There was a great concert in town last night.",
        "I tried a new recipe for soup.",
        "My neighbours are renovating again, so noisy.",
        "I finished the puzzle at last!",
        "The heating in the flat isn't working properly.",
        "I'm learning a few words of Italian.",
        "We went to the lake and swam a little.",
        "I've been sleeping better this week.",
        "I spent the whole evening answering emails.",
        "Someone brought cake to work today.",
    ],
    "de": [
        "Guten Morgen! Ich habe richtig schlecht geschlafen.",
        "Ich bin heute so müde.",
        "Hier hat es den ganzen Tag geregnet.",
        "Ich habe Nudeln zum Abendessen gemacht.",
        "Hast du gestern das Spiel gesehen?",
        "Endlich habe ich die Küche geputzt.",
        "Auf der Arbeit war wieder viel los.",
        "Ich war lange im Park spazieren.",
        "Ich weiß nicht, was ich als Nächstes lesen soll.",
        "Der Bus kam schon wieder zu spät.",
        "Ich überlege, Brot backen zu lernen.",
        "Mein Handyakku ist so schnell leer.",
        "Am Samstag haben wir mit Freunden gegrillt.",
        "Erst Kaffee, dann alles andere.",
        "Ich brauche wirklich Urlaub.",
        "Das Wochenende ging viel zu schnell vorbei.",
        "Ich habe mir neue Laufschuhe gekauft.",
        "Das war so eine lange Woche.",
        "Meine Tomaten werden endlich rot.",
        "Den platten Reifen am Fahrrad habe ich selbst geflickt.",
        "Gestern Abend war ein tolles Konzert in der Stadt.",
        "Ich habe ein neues Suppenrezept ausprobiert.",
        "Die Nachbarn renovieren schon wieder, so laut.",
        "Endlich habe ich das Puzzle fertig!",
        "Die Heizung in der Wohnung funktioniert nicht richtig.",
        "Ich lerne gerade ein paar Wörter Italienisch.",
        "Wir waren am See und sind ein bisschen geschwommen.",
        "Diese Woche schlafe ich besser.",
        "Ich habe den ganzen Abend E-Mails beantwortet.",
        "Heute hat jemand Kuchen mit zur Arbeit gebracht.",
    ],
    "es": [
        "¡Buenos días! He dormido fatal.",
        "Hoy estoy muy cansado.",
        "Aquí ha llovido todo el día.",
        "He hecho pasta para cenar.",
        "¿Viste el partido ayer?",
        "Por fin he limpiado la cocina.",
        "En el trabajo hubo mucho lío otra vez.",
        "Di un paseo largo por el parque.",
        "No sé qué leer ahora.",
        "El autobús volvió a llegar tarde.",
        "Estoy pensando en aprender a hacer pan.",
        "La batería del móvil se me gasta rapidísimo.",
        "El sábado hicimos una barbacoa con amigos.",
        "Primero café, luego todo lo demás.",
        "De verdad necesito unas vacaciones.",
        "El fin de semana se pasó volando.",
        "Me he comprado zapatillas nuevas para correr.",
        "Ha sido una semana larguísima.",
        "Mis tomates por fin se están poniendo rojos.",
        "Arreglé yo mismo el pinchazo de la bici.",
        "Anoche hubo un concierto genial en el centro.",
        "Probé una receta nueva de sopa.",
        "Los vecinos están otra vez de obras, qué ruido.",
        "¡Por fin terminé el puzle!",
        "La calefacción del piso no funciona bien.",
        "Estoy aprendiendo unas palabras de italiano.",
        "Fuimos al lago y nadamos un poco.",
        "Esta semana estoy durmiendo mejor.",
        "Me pasé toda la tarde contestando correos.",
        "Hoy alguien trajo tarta al trabajo.",
    ],
    "ru": [
        "Доброе утро! Спала просто ужасно.",
        "Я сегодня так устала.",
        "У нас весь день шёл дождь.",
        "Сделала пасту на ужин.",
        "Ты видел вчерашний матч?",
        "Наконец-то убрала кухню.",
        "На работе опять была запарка.",
        "Долго гуляла в парке.",
        "Не могу решить, что читать дальше.",
        "Автобус опять опоздал.",
        "Думаю научиться печь хлеб.",
        "Батарея телефона так быстро садится.",
        "В субботу жарили шашлыки с друзьями.",
        "Сначала кофе, потом всё остальное.",
        "Мне очень нужен отпуск.",
        "Выходные пролетели слишком быстро.",
        "Купила новые кроссовки для бега.",
        "Какая же длинная была неделя.",
        "Мои помидоры наконец краснеют.",
        "Сама заклеила колесо велосипеда.",
        "Вчера вечером в городе был классный концерт.",
        "Попробовала новый рецепт супа.",
        "Соседи опять делают ремонт, так шумно.",
        "Наконец-то собрала пазл!",
        "Отопление в квартире плохо работает.",
        "Учу несколько слов по-итальянски.",
        "Мы ездили на озеро и немного поплавали.",
        "На этой неделе сплю лучше.",
        "Весь вечер отвечала на письма.",
        "Сегодня кто-то принёс на работу торт.",
    ],
    "ja": [
        "おはよう！全然眠れなかった。",
        "今日はすごく疲れた。",
        "こっちは一日中雨だった。",
        "夕飯にパスタを作りました。",
        "昨日の試合見た？",
        "やっと台所を掃除しました。",
        "仕事がまた忙しかった。",
        "公園を長く散歩しました。",
        "次に何を読もうか迷っています。",
        "またバスが遅れた。",
        "パン作りを習おうかと思っています。",
        "スマホの電池がすぐなくなる。",
        "土曜日に友達とバーベキューをしました。",
        "まずコーヒー、それから全部。",
        "本当に休みが欲しい。",
        "週末があっという間に終わった。",
        "新しいランニングシューズを買いました。",
        "長い一週間だった。",
        "トマトがやっと赤くなってきた。",
        "自転車のパンクを自分で直しました。",
        "昨日の夜、町ですごくいいコンサートがあった。",
        "新しいスープのレシピを試しました。",
        "お隣さんがまたリフォームしていて、うるさい。",
        "やっとパズルが完成した！",
        "部屋の暖房がちゃんと動かない。",
        "イタリア語の単語を少し勉強しています。",
        "湖に行って少し泳ぎました。",
        "今週はよく眠れています。",
        "一晩中メールの返事を書いていました。",
        "今日、誰かが職場にケーキを持ってきた。",
    ],
    "zh": [
        "早上好！我昨晚睡得特别差。",
        "我今天好累。",
        "我们这儿下了一整天的雨。",
        "我晚饭做了意大利面。",
        "你昨天看比赛了吗？",
        "我终于把厨房打扫干净了。",
        "工作又很忙。",
        "我在公园里走了很久。",
        "我不知道接下来读什么书。",
        "公交车又晚点了。",
        "我在考虑学做面包。",
        "我的手机电池掉电太快了。",
        "星期六我们和朋友一起烧烤了。",
        "先喝咖啡，再说别的。",
        "我真的需要休个假。",
        "周末过得太快了。",
        "我买了一双新跑鞋。",
        "这个星期好漫长。",
        "我种的西红柿终于红了。",
        "自行车爆胎是我自己补好的。",
        "昨晚城里有一场很棒的音乐会。",
        "我试了一个新的汤的做法。",
        "邻居又在装修了，太吵了。",
        "拼图终于拼完了！",
        "家里的暖气不太好使。",
        "我在学几句意大利语。",
        "我们去湖边游了一会儿泳。",
        "这周我睡得好多了。",
        "我整个晚上都在回邮件。",
        "今天有人带了蛋糕来公司。",
    ],
}

REPLIES: dict[str, list[str]] = {
    "en": [
        "That sounds lovely!",
        "Tell me more about it.",
        "Oh no, I'm sorry to hear that.",
        "How did that make you feel?",
        "Good for you!",
        "I'll remember that.",
        "Ha, I know what you mean.",
        "What are you planning next?",
        "That's interesting!",
        "Take care of yourself.",
        "Sounds like a busy day.",
        "I'm glad you told me.",
    ],
    "de": [
        "Das klingt schön!",
        "Erzähl mir mehr davon.",
        "Oh nein, das tut mir leid.",
        "Wie hast du dich dabei gefühlt?",
        "Gut gemacht!",
        "Das merke ich mir.",
        "Ha, ich weiß, was du meinst.",
        "Was hast du als Nächstes vor?",
        "Interessant!",
        "Pass gut auf dich auf.",
        "Klingt nach einem vollen Tag.",
        "Schön, dass du mir das erzählst.",
    ],
    "es": [
        "¡Qué bien suena!",
        "Cuéntame más.",
        "Vaya, lo siento mucho.",
        "¿Cómo te sentiste?",
        "¡Bien hecho!",
        "Me lo apunto.",
        "Ja, ya sé lo que quieres decir.",
        "¿Qué tienes pensado hacer ahora?",
        "¡Qué interesante!",
        "Cuídate mucho.",
        "Parece un día muy ajetreado.",
        "Me alegra que me lo cuentes.",
    ],
    "ru": [
        "Звучит чудесно!",
        "Расскажи подробнее.",
        "Ох, мне очень жаль.",
        "Как ты себя при этом чувствовала?",
        "Молодец!",
        "Я это запомню.",
        "Ха, понимаю, о чём ты.",
        "Что планируешь дальше?",
        "Как интересно!",
        "Береги себя.",
        "Похоже, день был насыщенный.",
        "Хорошо, что ты мне рассказала.",
    ],
    "ja": [
        "いいですね！",
        "もっと聞かせてください。",
        "それは大変でしたね。",
        "どんな気持ちでしたか？",
        "よかったですね！",
        "覚えておきます。",
        "わかります、その気持ち。",
        "次は何をする予定ですか？",
        "面白いですね！",
        "無理しないでくださいね。",
        "忙しい一日でしたね。",
        "話してくれてうれしいです。",
    ],
    "zh": [
        "听起来真不错！",
        "多跟我说说吧。",
        "哎呀，真遗憾。",
        "你当时感觉怎么样？",
        "真棒！",
        "我记住了。",
        "哈，我懂你的意思。",
        "你接下来打算做什么？",
        "真有意思！",
        "照顾好自己。",
        "听起来是很忙的一天。",
        "谢谢你告诉我。",
    ],
}

MEMBERS = {"en": "Robin", "de": "Jonas", "es": "Paula", "ru": "Ирина", "ja": "陽子", "zh": "林芳"}
LANGUAGES = tuple(FACTS)

_FULL_WIDTH = {ord(c): ord(c) + 0xFEE0 for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"} | {
    ord("-"): 0xFF0D
}


def _order_number(rng: random.Random) -> dict[str, str]:
    letters = "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXZ") for _ in range(2))
    number = f"{letters}-{rng.randrange(1000, 10000)}"
    return {"hw": number, "fw": number.translate(_FULL_WIDTH)}


class _Number(dict):  # "{ord}" formats as the plain number, "{ord[fw]}" full-width
    def __format__(self, spec: str) -> str:
        return self["hw"]


def _agent(language: str, number: int, rng: random.Random) -> Agent:
    slots = {name: rng.choice(values) for name, values in SLOTS[language].items()}
    slots["ord"] = _Number(_order_number(rng))
    user: list[tuple[str, str | None]] = []  # (text, the fact it states)
    for kind in KINDS:
        user.append((FACTS[language][kind][0].format_map(slots), kind))
        user.extend((miss, None) for miss in NEAR_MISSES[language][kind])
    user.extend((line, None) for line in EVERYDAY[language])
    rng.shuffle(user)
    agent = Agent(language, f"{MEMBERS[language]} {number + 1}")
    where: dict[str, int] = {}
    for text, kind in user:
        if kind is not None:
            where[kind] = len(agent.messages)
        agent.messages.append(("user", text))
        agent.messages.append(("assistant", rng.choice(REPLIES[language])))
    for kind in KINDS:
        for query_kind, template in FACTS[language][kind][1]:
            agent.queries.append(Query(template.format_map(slots), query_kind, kind, where[kind]))
    return agent


def build(agents: int = 10, seed: int = 1, languages: tuple[str, ...] = LANGUAGES) -> list[Agent]:
    """`agents` members per language, the same on every run for the same arguments."""
    out = []
    for language in languages:
        rng = random.Random(f"{seed}-{language}")
        out.extend(_agent(language, n, rng) for n in range(agents))
    return out
