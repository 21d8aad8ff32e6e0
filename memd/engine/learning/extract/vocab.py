"""The extractor's word lists: the tech vocabulary that names fact keys, the words that
start, stop or rule out a value, and the word forms that put a memory in third person.

Data only, kept apart from the code that reads it so either can be read on its own.
"""

from __future__ import annotations

# -- vocabulary ------------------------------------------------------------------------
# kind -> "canonical|alias|...; ...". A kind is also the fact key its terms set, except
# the KEYLESS ones.
VOCAB = {
    "language": "python|py|python3; javascript|js|ecmascript; typescript|ts; java; kotlin; "
    "scala; go|golang; rust; c; c++|cpp; c#|csharp; f#; ruby; php; swift; objective-c|objc; "
    "elixir; erlang; haskell; clojure; lua; perl; r; julia; dart; zig; ocaml; sql; html; "
    "css; nim; crystal; elm; matlab; fortran; cobol; groovy; solidity; assembly; gleam; "
    "webassembly|wasm; lisp; racket",
    "editor": "vscode|vs code|visual studio code; visual studio; vim; neovim|nvim; emacs; "
    "intellij|intellij idea; pycharm; webstorm; goland; clion; rider; sublime text|sublime; "
    "atom; nano; helix; zed; cursor; xcode; android studio; eclipse; jupyter|jupyterlab; "
    "notepad++",
    "os": "linux; ubuntu; debian; fedora; arch linux|arch|archlinux; nixos; "
    "macos|mac os|osx|os x; windows; wsl|wsl2; freebsd; openbsd; centos; rhel; alpine; "
    "linux mint|mint; manjaro; chromeos",
    "cloud": "aws|amazon web services; gcp|google cloud|google cloud platform; azure; "
    "digitalocean; cloudflare; hetzner; linode; ovh; scaleway",
    "deploy_tool": "docker; kubernetes|k8s; podman; helm; terraform; ansible; pulumi; nomad; "
    "heroku; vercel; netlify; fly.io|flyio; render; railway; docker compose|docker-compose; "
    "openshift; argocd|argo cd; systemd; k3s; dokku; aws lambda|lambda",
    "database": "postgresql|postgres|psql; mysql; sqlite; mongodb|mongo; redis; mariadb; "
    "cassandra; dynamodb; elasticsearch; opensearch; clickhouse; snowflake; bigquery; "
    "supabase; firebase; duckdb; neo4j; cockroachdb; sql server|mssql; pgvector; qdrant",
    "framework": "django; flask; fastapi; rails|ruby on rails; react; vue|vue.js|vuejs; "
    "angular; svelte|sveltekit; next.js|nextjs; nuxt; spring|spring boot; express|express.js; "
    "laravel; symfony; .net|dotnet; asp.net; tailwind|tailwindcss; pytorch|torch; "
    "tensorflow; jax; pandas; numpy; htmx; phoenix; actix; axum; flutter; react native; "
    "electron; streamlit",
    "runtime": "node.js|node|nodejs; deno; bun",
    "shell": "bash; zsh; fish; powershell|pwsh; nushell",
    "package_manager": "npm; yarn; pnpm; pip; pipx; poetry; uv; conda; cargo; homebrew|brew; "
    "nix; pdm",
    "vcs": "git; mercurial|hg; svn",
    "code_host": "github; gitlab; bitbucket",
    "ci": "github actions; gitlab ci; jenkins; circleci; travis ci|travis; buildkite",
    "terminal": "iterm|iterm2; tmux; alacritty; kitty; wezterm; ghostty",
    "test_framework": "pytest; jest; vitest; mocha; rspec; junit; playwright; cypress",
    "linter": "ruff; black; prettier; eslint; mypy; flake8; pylint",
    "indentation": "tabs; spaces",
    "theme": "dark mode|dark theme; light mode|light theme",
    "naming_style": "snake_case; camelcase; pascalcase; kebab-case",
    "response_style": "concise; verbose; terse; detailed; short answers|short responses; "
    "bullet points",
    "syntax": "semicolons; type hints; docstrings",
    "ai": "openai; chatgpt; claude; llama; ollama; copilot",
}
KEYLESS = frozenset({"syntax", "ai"})
# Words that are ordinary English in lower case: tech terms only when capitalised.
CAPITALIZED_ONLY = frozenset(
    "go rust swift dart c r ruby julia crystal elm nim racket spring express node bun atom "
    "cursor helix zed render railway arch mint kitty fish eclipse sublime nano windows rails "
    "react vue angular svelte phoenix flutter jax nix apt brew torch lambda black jest mocha "
    "cypress poetry cargo assembly electron".split()
)


def _build_terms() -> dict[str, tuple[str, str]]:
    terms: dict[str, tuple[str, str]] = {}
    for kind, spec in VOCAB.items():
        for entry in spec.split(";"):
            names = [n.strip() for n in entry.split("|")]
            for name in names:
                terms[name] = (names[0], kind)
    return terms


TERMS = _build_terms()  # surface form (lowercase, single-spaced) -> (canonical, kind)

# -- words -------------------------------------------------------------------------------
IDENTITY_KEYS = frozenset(
    "name pronouns timezone location employer role project birthday username "
    "company_location native_language".split()
)
# "my <noun> is X" -> fact key
NOUN_KEYS = {
    "editor": "editor", "ide": "editor", "text editor": "editor", "code editor": "editor",
    "os": "os", "operating system": "os", "shell": "shell", "terminal": "terminal",
    "language": "language", "programming language": "language", "database": "database",
    "db": "database", "framework": "framework", "web framework": "framework",
    "cloud": "cloud", "cloud provider": "cloud", "theme": "theme", "color scheme": "theme",
    "colour scheme": "theme", "stack": "stack", "tech stack": "stack",
    "company": "employer", "employer": "employer", "job": "role", "role": "role",
    "title": "role", "job title": "role", "position": "role", "occupation": "role",
    "timezone": "timezone", "time zone": "timezone", "pronouns": "pronouns",
    "location": "location", "city": "location", "hometown": "location",
    "birthday": "birthday", "username": "username", "handle": "username",
    "github username": "username", "github handle": "username",
    "package manager": "package_manager", "browser": "browser",
    "indentation": "indentation", "test framework": "test_framework",
    "deploy tool": "deploy_tool", "deployment tool": "deploy_tool",
    "native language": "native_language", "first language": "native_language",
    "mother tongue": "native_language",
}
ROLE_NOUNS = frozenset(
    "developer dev engineer programmer coder designer student teacher professor manager "
    "scientist analyst architect consultant founder cofounder co-founder ceo cto cfo coo vp "
    "pm researcher writer author doctor nurse lawyer admin administrator sre devops lead "
    "intern freelancer contractor hobbyist beginner newbie maintainer contributor owner "
    "entrepreneur marketer accountant editor journalist artist musician photographer "
    "recruiter tester qa librarian physician pharmacist technician specialist director "
    "officer executive president parent mom dad retiree veteran hacker tinkerer".split()
)
NOT_ROLES = frozenset(
    "other either neither ever never over rather after under better bigger faster number "
    "matter order power paper water answer color colour error mirror minor honor horror "
    "believer lover hater follower sucker stickler moment comment different content event "
    "current recent present decent ancient giant pleasant important constant elegant "
    "relevant distant brilliant instant silent fan".split()
)
NOT_NAMES = frozenset(
    "not no a an the in at on from with for to of by about into and or but so very really "
    "just also here there back done fine good great ok okay sorry sure glad happy sad tired "
    "busy ready new still now currently using working trying going looking getting doing "
    "having thinking gonna kinda sorta whatever anything something later maybe irrelevant "
    "unimportant secret private hard long weird common unusual spelled pronounced actually "
    "english american british german french indian chinese japanese spanish italian "
    "canadian australian russian dutch swedish norwegian danish finnish polish brazilian "
    "mexican korean irish scottish european asian african christian muslim jewish catholic "
    "hindu buddhist atheist vegan vegetarian monday tuesday wednesday thursday friday "
    "saturday sunday january february march july september october november december i me "
    "my you he she they we it this that lol hi hey btw please thanks online offline home "
    "out off up late early free available allergic based located originally married single "
    "retired learning when if whenever anytime tomorrow today crazy lazy old paranoid "
    "instead too again".split()
)
# Words that may follow "I'm <Name>" (anything else makes it "I'm <Adjective> ...").
NAME_FOLLOWERS = frozenset(
    "and from here btw too again now instead but by the a an who of at with in on also "
    "actually lol thanks".split()
)
VAGUE = frozenset(
    "it it's this that these those them him her you your something anything nothing "
    "everything what which how when one".split()
)
DETERMINERS = frozenset("a an the both either neither".split())
REFERENCES = frozenset(
    "one ones option options former latter above previous suggestion answer idea approach "
    "solution first second third last version".split()
)
NOT_FAVORITES = frozenset(  # "my favorite part is ...": about this chat
    "part thing bit one way line answer option example response suggestion".split()
)
# Words that open a statement, not an order ("from now on I'll ...", "in the future, the
# web will ..."): after "from now on" they leave no instruction.
NOT_ORDERS = frozenset(
    "i my we our it its that this these those the a an there he she they his her their "
    "people everyone everybody everything nothing all some many most more things".split()
)
# Verbs that say nothing as a whole value, the rest cut off at a stop word ("do so").
BARE_VERBS = frozenset("be do have get go make".split())
NOT_PLACES = frozenset("night nights weekends home times least work fear peace".split())
CLAUSE_STOPS = frozenset(
    "because since but although though so btw anyway anyways thanks lol cause cuz".split()
)
LIST_STOPS = CLAUSE_STOPS | frozenset(
    "with at in on to for from as who which that where when while if unless not over than "
    "rather instead now too using via by currently today here there so these nowadays "
    "anymore mostly mainly usually please except".split()
)
STRICT_STOPS = LIST_STOPS | frozenset({"and", "or", "&"})
ROLE_STOPS = STRICT_STOPS | frozenset({"of", "working", "based", "living", "located"})
MODALS = frozenset(
    "can can't cannot could couldn't will won't would wouldn't shall should shouldn't must "
    "mustn't may might".split()
)
IRREGULAR = {"have": "has", "do": "does", "go": "goes", "be": "is", "am": "is",
              "are": "is", "don't": "doesn't", "dont": "doesn't"}
PRONOUNS = {"i'm": "the user is", "i've": "the user has", "i'd": "the user would",
             "i'll": "the user will", "i": "the user", "me": "the user", "my": "the user's",
             "mine": "the user's", "myself": "themselves", "you": "the assistant",
             "your": "the assistant's", "yours": "the assistant's",
             "you're": "the assistant is", "yourself": "itself"}
TEAM_MODALS = {"have to": "has to", "are not allowed to": "is not allowed to",
                "'re not allowed to": "is not allowed to", "are required to": "is required to",
                "'re required to": "is required to"}
CAP_STOP = frozenset(
    "i i'm i've i'd i'll im ok okay hi hello hey thanks please yes no the a an my we our you "
    "it this that and but or so also actually btw fyi always never not don't dont do must "
    "should only all any every very really just now then here there what when where why how "
    "who which is are be to of in on at for with from by as if mr mrs ms dr prof".split()
)
CUT = ",;:!?()[]{}\"“”"  # punctuation after a word that ends a short value
CLAUSE_CUT = ";:!?()[]{}"  # ... and a clause-long one
EDGE = " \t\"'“”‘’*_()[]-–—"  # stripped from both ends of a clause
TITLES = frozenset("mr mrs ms dr prof".split())
ABBREVIATIONS = frozenset("mr. mrs. ms. dr. prof. st. e.g. i.e. vs. approx. no.".split())
