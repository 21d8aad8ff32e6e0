"""Labelled texts for the sanitizer (memd.privacy): secrets and personal data that must
go, and look-alikes that must stay, in code, logs, config files and prose.

Every key below is made up (random characters in the provider's format). Decisions the
corpus pins down:

- documentation examples stay: AWS's ``AKIAIOSFODNN7EXAMPLE``, ``sk-...``, ``<your-key>``,
  ``postgres://user:password@localhost``;
- well-known test card numbers that pass the Luhn check (4111 1111 1111 1111) are
  redacted in ``secrets+pii`` mode: nothing tells them from a real card;
- all email addresses are personal data, example.com ones included.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    text: str
    secrets: tuple[str, ...]  # what must not survive; empty for a look-alike
    mode: str = "secrets"


def pos(text: str, *secrets: str) -> Case:
    return Case(text, secrets)


def pii(text: str, *secrets: str) -> Case:
    return Case(text, secrets, "secrets+pii")


def neg(text: str, mode: str = "secrets") -> Case:
    return Case(text, (), mode)


OPENAI = "sk-u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dKLzdocJ2isAj"
OPENAI_PROJ = ("sk-proj-IhKtJ0RlgLKOmxgJTeKdNnFRIBXuDL7DxtpYlSXpfKtHF4vUCsMehGAkWvj7FAc9_"
               "QeWJKY40uvSwMFLZDe1f8rESQedUSt")
ANTHROPIC = ("sk-ant-api03-PKR0CsTy4Qwb8DwkNhFdnXsiVpzz63FfkCzJr4i0B3JrTAwR4y9ojfljoQoaF1Llqsa"
             "jAIxNKu8iS2G8-NPRVdD53X83RAA")
AKIA = "AKIA9ZZZZG4ZDMEN2KHV"
ASIA = "ASIADGAJ8GXBENYJQWX4"
AWS_SECRET = "po/799NksnRH9ucAUsdMlHUvTCQCyEZDz+TddJ8H"
GHP = "ghp_mSM9wCZ7Uw9xfogoEmvnEN5N1aE6PwZPf1Qh"
GHO = "gho_6yYTWmE4lBYOvfZ8UzDzV8fUkkibjL5DZPjN"
GHS = "ghs_0MEQ7wjJJibaZUPgHV7iB3m03nbqnsGpWLuq"
GITHUB_PAT = ("github_pat_IA1id6Vw5DQL05HA064GiI_jHGb3CXlMaXZjljENUhJduRHHJEYXg4JdpmrcXgGCJbW56eC"
              "uNGMGmSrCGI")
GLPAT = "glpat-ZEG8pSH4487q7J58m1Ci"
XOXB = "xoxb-616751361341-2524273167232-TBGzvAmwufUxbvJDCTbyvHNs"
XOXP = "xoxp-811311440242-646288975140-2614014193141-e0ad84173581569969e58b081006f7e3"
STRIPE = "sk_live_Q0PBQFI14zGtSnovm14TUOiz"
STRIPE_RK = "rk_live_wd1iaeOV4qBkdfQ1y3GQsMpS"
GOOGLE = "AIzaLf6xuI5aHUQPFeNBTxaQWk8JzFalHlsZfYc"
HF = "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"
NPM = "npm_6HWGK10Zb0RLZ5TR9SPofbciOx9gy1CJdObO"
SENDGRID = "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"
TWILIO = "SK36f99eee3692f09e2e8c662248b483b7"
HEX32 = "ffc050fec94dbca3a0aac36098b2cc2b"
B64 = "pvujA/C5Q52ryFlwRlOEVHzc0X0AWIRh/JUqBlIFXZ53"
AZURE = ("Ncqe28+ajY75FnCttn6kfaqDeMqG3omjMyXHCabM6JOF8EFd0Nhcy/1kGD2VD/eR1UYzaLiA/zNyD7CHLn/"
         "xC+==")
TOK = "A6Qd8Mj7zdnbMjAdTdlzC5T4uUhf7kvm"
TOK2 = "lP7HVDctQUy1xvCkgafrfwA9"
GOCSPX = "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"
PYPI = ("pypi-AgEIcHlwaS5vcmcEbOApZOXzcycDeZ6dqmVe5Mvxrv99NcqVTSu7rtaUWM6ZO88eb0ogET9D9XyYq6B0"
        "Fi7Fl")
DO = "dop_v1_0947aaeb26c57d21fa5d328263dfe574de739988b886e7577496a2c8773e130f"
MAILGUN = "key-7eb19731662b5e803b61ba4168160adb"
TELEGRAM = "AAeAgYzQJjOIfPkzSrAsQtA9dtVK4wAAb3X"
GROQ = "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"
SQUARE = "sq0atp-WZY9Zmti18c6EudM7Oyf5T"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9l"
       "IiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM_BODY = ("MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi6Z6rBkD4b7Y0OCtGv0Yhz1Hq8\n"
            "vJ4aB7kQ2m9XcVf0Zp3Lr6Yt1Nn8Ww5Ee2Rr7Tt4Uu9Ii0Oo3Pp6Aa1Ss5Dd8Ff2\n"
            "Gg7Hh4Jj9Kk0Ll3Zz6Xx1Cc5Vv8Bb2Nn7Mm4Qq9Ww0Ee3Rr6Tt1Yy5Uu8Ii2Oo7P==")
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
OPENSSH = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
           "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
           "QyNTUxOQAAACDk8Xq3Zb1mR4vT9cYp2WnL6sJ0aH5uE7oK3fN8dG1iBwAAAJgQ2b3kENm9\n"
           "-----END OPENSSH PRIVATE KEY-----")

SECRETS: list[Case] = [
    # provider keys, in code, config, shell and prose
    pos(f'client = OpenAI(api_key="{OPENAI}")', OPENAI),
    pos(f"OPENAI_API_KEY={OPENAI_PROJ}", OPENAI_PROJ),
    pos(f"export ANTHROPIC_API_KEY={ANTHROPIC}", ANTHROPIC),
    pos(f"here is my key {OPENAI}, can you check why it fails?", OPENAI),
    pos(f"anthropic = Anthropic(api_key='{ANTHROPIC}')", ANTHROPIC),
    pos(f"aws_access_key_id = {AKIA}\naws_secret_access_key = {AWS_SECRET}", AKIA, AWS_SECRET),
    pos(f"AWS_ACCESS_KEY_ID={ASIA}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\n"
        f"AWS_SESSION_TOKEN={TOK}{TOK2}", ASIA, AWS_SECRET, TOK + TOK2),
    pos(f"Access key ID,Secret access key\n{AKIA},{AWS_SECRET}", AKIA, AWS_SECRET),
    pos(f'{{"Credentials": {{"AccessKeyId": "{ASIA}", "SecretAccessKey": "{AWS_SECRET}"}}}}',
        ASIA, AWS_SECRET),
    pos(f"git remote set-url origin https://{GHP}@github.com/acme/api.git", GHP),
    pos(f"GITHUB_TOKEN: {GHS}", GHS),
    pos(f"gh auth token -> {GHO}", GHO),
    pos(f'token = "{GITHUB_PAT}"', GITHUB_PAT),
    pos(f"curl -H 'PRIVATE-TOKEN: {GLPAT}' https://gitlab.com/api/v4/projects", GLPAT),
    pos(f"SLACK_BOT_TOKEN={XOXB}", XOXB),
    pos(f"slack_client = WebClient(token='{XOXP}')", XOXP),
    pos(f"stripe.api_key = \"{STRIPE}\"", STRIPE),
    pos(f"restricted key for the reports job: {STRIPE_RK}", STRIPE_RK),
    pos(f"https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key={GOOGLE}", GOOGLE),
    pos(f"huggingface-cli login --token {HF}", HF),
    pos(f"//registry.npmjs.org/:_authToken={NPM}", NPM),
    pos(f"sg = SendGridAPIClient('{SENDGRID}')", SENDGRID),
    pos(f"TWILIO_API_KEY={TWILIO}", TWILIO),
    pos(f'GOOGLE_CLIENT_SECRET="{GOCSPX}"', GOCSPX),
    pos(f"[pypi]\n  username = __token__\n  password = {PYPI}", PYPI),
    pos(f"doctl auth init -t {DO}", DO),
    pos(f"MAILGUN_API_KEY={MAILGUN}", MAILGUN),
    pos(f"bot = Bot('294130787:{TELEGRAM}')", TELEGRAM),
    pos(f"GROQ_API_KEY={GROQ}", GROQ),
    pos(f"square access token {SQUARE}", SQUARE),
    pos(f"DefaultEndpointsProtocol=https;AccountName=acmelogs;AccountKey={AZURE};"
        "EndpointSuffix=core.windows.net", AZURE),
    pos("curl 'https://acme.blob.core.windows.net/c/f.txt?sv=2022-11-02&ss=b&srt=o&sp=r"
        "&se=2025-01-01T00:00:00Z&sig=Zx8mQk3nR7vT2pL9wYc4Hs6Jd1Fb5Ga0Ue8Io3Kr2Nq%3D'",
        "Zx8mQk3nR7vT2pL9wYc4Hs6Jd1Fb5Ga0Ue8Io3Kr2Nq"),
    pos("SLACK_WEBHOOK=https://hooks.slack.com/services/T0A1B2C3D/B0E1F2G3H/"
        "xY7zQ2wE9rT4yU1iO6pA3sD8", "xY7zQ2wE9rT4yU1iO6pA3sD8"),
    # private keys and tokens
    pos(f"$ cat ~/.ssh/id_rsa\n{PEM}\n$ ls", PEM_BODY.splitlines()[1], PEM_BODY.splitlines()[2]),
    pos(f"{OPENSSH}\n", "QyNTUxOQAAACDk8Xq3Zb1mR4vT9cYp2WnL6sJ0aH5uE7oK3fN8dG1iBwAAAJgQ2b3kENm9"),
    pos('{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
        'MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\\n'
        'Mzv2n5ZbZ3Qw1lM7pRt0yX4kN8hG2jF6dS9aQ3wE5rT7uY1iO0pL4kJ8hG3fD2sA\\n'
        '-----END PRIVATE KEY-----\\n", "client_email": "x@y.iam.gserviceaccount.com"}',
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"),
    pos(f"Authorization: Bearer {JWT}", JWT),
    pos(f"set-cookie: session={JWT}; Path=/; HttpOnly", JWT),
    pos(f"curl -H \"Authorization: Bearer {TOK}\" https://api.acme.dev/v1/me", TOK),
    pos("GET /callback?code=x&access_token=Qm9vT2xlYW4xMjM0NTY3ODkwYWJj&state=7 200",
        "Qm9vT2xlYW4xMjM0NTY3ODkwYWJj"),
    pos("curl -u admin:x -H 'Authorization: Basic YWRtaW46czNjcjN0UGFzcw==' localhost:9200",
        "YWRtaW46czNjcjN0UGFzcw=="),
    # passwords in URLs
    pos("DATABASE_URL=postgres://app:Xk9#mQ2vLp@db.internal:5432/app", "Xk9#mQ2vLp"),
    pos("mongodb+srv://admin:s3cr3tP4ss@cluster0.ab1cd.mongodb.net/test?retryWrites=true",
        "s3cr3tP4ss"),
    pos("redis://:hunter2redis@cache.local:6379/0", "hunter2redis"),
    pos("amqp://guest:R4bb1tPw!@rabbit:5672/", "R4bb1tPw!"),
    pos("git clone https://deploy:gh0stRider77@git.acme.io/ops/infra.git", "gh0stRider77"),
    # assignments: code, .env, YAML, JSON, TOML, properties, shell, SQL
    pos('password = "hunter2"', "hunter2"),
    pos("DB_PASSWORD=hunter2", "hunter2"),
    pos('config = {"user": "svc", "password": "Tr0ub4dor&3"}', "Tr0ub4dor&3"),
    pos("export PGPASSWORD='correct-horse-9'", "correct-horse-9"),
    pos("database:\n  host: db.local\n  user: app\n  password: wint3rIsC0ming\n",
        "wint3rIsC0ming"),
    pos("spring.datasource.password=Spr1ngB00t!", "Spr1ngB00t!"),
    pos('[database]\npassword = "toml-pass-42"\n', "toml-pass-42"),
    pos("conn = psycopg.connect(host='db', user='app', password='pg_Secret_2024')",
        "pg_Secret_2024"),
    pos("MYSQL_ROOT_PASSWORD=r00tpw\nMYSQL_DATABASE=shop", "r00tpw"),
    pos("docker run -e POSTGRES_PASSWORD=Pg!2024x postgres:16", "Pg!2024x"),
    pos("CREATE USER reporter WITH PASSWORD 'R3port!ng';", "R3port!ng"),
    pos("ALTER USER 'app'@'%' IDENTIFIED BY 'mysqlPw#1';", "mysqlPw#1"),
    pos("mysql --user=root --password=Sup3rS3cret -h 127.0.0.1", "Sup3rS3cret"),
    pos("psql --password hunter2x --host db", "hunter2x"),
    pos(f'const API_KEY = "{HEX32}";', HEX32),
    pos(f'apiKey: "{TOK}",', TOK),
    pos(f"secret_key = '{B64}'", B64),
    pos(f"DJANGO_SECRET_KEY={TOK2}x9", TOK2 + "x9"),
    pos(f'"client_secret": "{TOK}"', TOK),
    pos(f"jwt:\n  secret: {B64}\n", B64),
    pos(f"x-api-key: {HEX32}", HEX32),
    pos(f"webhook_secret := \"{TOK2}\"", TOK2),
    pos(f"ENCRYPTION_KEY={B64}", B64),
    pos(f"refresh_token={TOK}&grant_type=refresh_token", TOK),
    pos(f"'auth_token' => '{HEX32}',", HEX32),
    pos(f"settings.SECRET = {{\"value\": 1}}\nsigning_key: \"{TOK}\"", TOK),
    pos(f"--api-key {HEX32}", HEX32),
    pos("cfg['password'] = 'Qw3rty!!'", "Qw3rty!!"),
    pos(f"password: str = \"dev-{TOK2}\"", TOK2),
    pos("2024-05-01T10:00:00Z INFO login user=alice password=Alic3pw! ip=10.0.0.7",
        "Alic3pw!"),
    pos("machine api.acme.dev\n  login bob\n  password: b0bsPassw0rd", "b0bsPassw0rd"),
    # prose
    pos("the db password is hunter2hunter2, don't share it", "hunter2hunter2"),
    pos("FYI the staging password is Tr0pic@l-Sun", "Tr0pic@l-Sun"),
    pos("my password for the vpn is \"blue sky 42\"", "blue sky 42"),
    pos("The wifi password is: CoffeeTime2024", "CoffeeTime2024"),
    pos("I changed the admin password to Zebra!Crossing9 yesterday", "Zebra!Crossing9"),
    pos(f"my api key is {HEX32}", HEX32),
    pos(f"the token is {TOK}, it expires Friday", TOK),
    pos("pw: Rosebud#1941", "Rosebud#1941"),
]

PERSONAL: list[Case] = [
    pii("Contact: jane.doe@example.com", "jane.doe@example.com"),
    pii("Author: Ada Lovelace <ada+git@analytical.engine.org>", "ada+git@analytical.engine.org"),
    pii("send the invoice to BILLING@ACME.CO.UK please", "BILLING@ACME.CO.UK"),
    pii('{"email": "m.rossi@mail.it", "plan": "pro"}', "m.rossi@mail.it"),
    pii("call me at +1 (415) 555-0132 tomorrow", "415) 555-0132"),
    pii("UK office: +44 20 7946 0958", "20 7946 0958"),
    pii("Telefon: 030 12345678", "12345678"),
    pii("ring the desk on 020 7946 0958", "7946 0958"),
    pii("support line (212) 555-0199", "555-0199"),
    pii("mobile: 06 12 34 56 78", "12 34 56 78"),
    pii("phone 4155550132", "4155550132"),
    pii("tel:+33142685300", "+33142685300"),
    pii("card 4111 1111 1111 1111 exp 12/27", "4111 1111 1111 1111"),
    pii("charged to 5500-0000-0000-0004 yesterday", "5500-0000-0000-0004"),
    pii("amex 3782 822463 10005", "3782 822463 10005"),
    pii("pan=4012888888881881", "4012888888881881"),
    pii("IBAN: DE89 3704 0044 0532 0130 00", "3704 0044 0532 0130"),
    pii("wire to GB82WEST12345698765432 by Friday", "GB82WEST12345698765432"),
    pii("FR1420041010050500013M02606", "FR1420041010050500013M02606"),
    pii(f"key {OPENAI} and mail ops@acme.dev", OPENAI, "ops@acme.dev"),
]

LOOKALIKES: list[Case] = [
    # hashes, ids, encodings
    neg("commit 9fceb02d0ae598e95dc970b74767f19372d61af8\nAuthor: CI <ci>"),
    neg("Merge pull request #42 from acme/fix-login (a1b2c3d)"),
    neg("request_id=550e8400-e29b-41d4-a716-446655440000 status=200 took=12ms"),
    neg("const uuid = 'f47ac10b-58cc-4372-a567-0e02b2c3d479';"),
    neg('"integrity": "sha512-v2kDEe57lecTulaDIuNTPy3Ry4gLGJ6Z1O3vE1krgXZNrsQ+8WLzMYdW'
        'HBPgBpeCSWMIVV1Ua9IRHjHKbj2YQ=="'),
    neg("resolved \"https://registry.yarnpkg.com/lodash/-/lodash-4.17.21.tgz#679591c564c3b"
        "ffaae8454cf0b3df370c3d6911c\""),
    neg("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    neg("FROM python:3.11-slim@sha256:2f4e6b3a9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b"
        "3c4d5e6f"),
    neg('<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUl'
        'EQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==">'),
    neg("etag: W/\"5e1b2c9d8f7a6b5c4d3e2f1a0b9c8d7e\""),
    neg("md5sum: d41d8cd98f00b204e9800998ecf8427e  empty.txt"),
    neg("docker pull ghcr.io/acme/api:sha-9fceb02"),
    neg("trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7"),
    neg("request 7f3a2b cached key=user:1234:profile"),
    # code that handles secrets without holding one
    neg('password = os.environ["DB_PASSWORD"]'),
    neg("token = get_token()"),
    neg("password = getpass.getpass('Password: ')"),
    neg("api_key = settings.OPENAI_API_KEY"),
    neg("password: str"),
    neg("password: Optional[str] = None"),
    neg("def login(username: str, password: str) -> Session:"),
    neg("if not password:\n    raise ValueError('password is required')"),
    neg("user.set_password(password)"),
    neg("token = request.headers.get('Authorization')"),
    neg("PASSWORD_MIN_LENGTH = 12"),
    neg("max_tokens = 1024"),
    neg('{"usage": {"prompt_tokens": 812, "completion_tokens": 96, "total_tokens": 908}}'),
    neg("token_count = len(tokens)"),
    neg("DB_PASSWORD=${DB_PASSWORD}"),
    neg("password: ${POSTGRES_PASSWORD}"),
    neg("password: \"{{ vault_db_password }}\""),
    neg("secretKeyRef:\n  name: db-credentials\n  key: password"),
    neg("TOKEN_URL=https://oauth2.googleapis.com/token"),
    neg("password_hash = bcrypt.hashpw(password.encode(), bcrypt.gensalt())"),
    neg("primary_key = 'id'"),
    neg("public_key = load_pem_public_key(data)"),
    neg('tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")'),
    neg("keyboard = Keyboard(layout='qwerty')"),
    neg("bypass = True"),
    neg('<input type="password" name="password" placeholder="Password">'),
    neg("csrf_token = '{{ csrf_token }}'"),
    neg("PWD=/home/alice/projects/memd"),
    neg("password_file: /run/secrets/db_password"),
    neg("docker login --password-stdin < token.txt"),
    neg("export OPENAI_API_KEY=$(cat ~/.openai)"),
    neg("page_token = response.next_page_token"),
    neg("const secret = process.env.JWT_SECRET;"),
    # placeholders and documentation examples
    neg("OPENAI_API_KEY=sk-..."),
    neg("OPENAI_API_KEY=<your-key>"),
    neg('client = OpenAI(api_key="sk-your-api-key-here")'),
    neg("aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    neg("DATABASE_URL=postgres://user:password@localhost:5432/mydb"),
    neg("password: ********"),
    neg("GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
    neg("api_key: YOUR_API_KEY"),
    neg("password = \"changeme\"  # set a real one in production"),
    neg("Authorization: Bearer <token>"),
    neg("Authorization: Bearer $TOKEN"),
    neg("SECRET_KEY=replace-me"),
    # prose about passwords without one
    neg("the password is incorrect, please try again"),
    neg("Your password must be at least 12 characters long."),
    neg("Forgot your password? Reset it from the login page."),
    neg("I rotated the API key yesterday and updated the vault."),
    neg("the password is stored in 1Password under 'staging db'"),
    neg("Tokens are counted with tiktoken before sending."),
    neg("the secret is to cache the embeddings"),
    neg("password: required, token: optional"),
    neg("Use a strong password and enable 2FA."),
    neg("the key is in the drawer"),
    # numbers, versions, dates and addresses (checked with personal data on)
    neg("upgraded numpy 1.26.4 -> 2.0.1 and torch 2.3.0+cpu", "secrets+pii"),
    neg("released on 2024-05-01 at 12:30:45.123456", "secrets+pii"),
    neg("deadline 01.02.2024, meeting 15/03/2024", "secrets+pii"),
    neg("server 192.168.100.200 and 10.0.0.1:8080, ipv6 fe80::1ff:fe23:4567:890a",
        "secrets+pii"),
    neg("order #1234567890123456 shipped", "secrets+pii"),
    neg("test card 4111 1111 1111 1112 is declined", "secrets+pii"),
    neg("epoch 1714567890123 ms, nanos 1714567890123456789", "secrets+pii"),
    neg("IBAN DE89 3704 0044 0532 0130 01 fails its check", "secrets+pii"),
    neg("npm install lodash@4.17.21 @types/node@20.11.5", "secrets+pii"),
    neg("git clone git@github.com:acme/api.git", "secrets+pii"),
    neg("@app.route('/users/<int:id>')\ndef user(id): ...", "secrets+pii"),
    neg("port 5432, pid 48213, exit code 137, 3.14159265358979", "secrets+pii"),
    neg("matrix = [[1, 2, 3], [4, 5, 6]]  # 123 456 7890 rows?", "secrets+pii"),
    neg("ISBN 978-3-16-148410-0", "secrets+pii"),
    neg("coords 48.858844, 2.294351", "secrets+pii"),
    neg("build 2024.05.01.1234 on node-17", "secrets+pii"),
    neg("the email field is required", "secrets+pii"),
    neg("CVE-2024-3094 in xz 5.6.0", "secrets+pii"),
    # personal data stays in secrets mode
    neg("Contact: jane.doe@example.com, +1 (415) 555-0132"),
    neg("card 4111 1111 1111 1111, IBAN DE89 3704 0044 0532 0130 00"),
]

ALL: list[Case] = SECRETS + PERSONAL + LOOKALIKES
