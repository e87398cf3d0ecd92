"""Extract the grammar test data from ../shared/data into tests/data/grammars/ (run once).

Sources (see each folder's SOURCE.md in ../shared/data):
* spider/grammars/cars_spider_sql.lark and spider/dev_gold.sql (Spider dev gold SQL, CC BY-SA 4.0;
  the ``query<TAB>db_id`` lines keep only the query) -> sql.lark, spider_dev_gold.txt.gz
* smiles/genlm/smiles.lark (Apache-2.0) and all molecules of smiles/molecule_sets/*.txt and
  smiles/genlm/GDB17_sample.txt (MIT / Apache-2.0) -> smiles.lark, smiles_molecules.txt.gz
* a selection of GBNF / EBNF / Lark grammars (llama.cpp, transformers-CFG: MIT; CARS) copied
  verbatim under their original file names.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT.parent / "shared" / "data"
DST = ROOT / "tests" / "data" / "grammars"

COPY = {
    "spider/grammars/cars_spider_sql.lark": "sql.lark",
    "smiles/genlm/smiles.lark": "smiles.lark",
    "smiles/transformers-CFG/generic.ebnf": "smiles_generic.ebnf",
    "gbnf_grammars/llama.cpp/json.gbnf": "json.gbnf",
    "gbnf_grammars/llama.cpp/arithmetic.gbnf": "arithmetic.gbnf",
    "gbnf_grammars/llama.cpp/c.gbnf": "c.gbnf",
    "gbnf_grammars/llama.cpp/chess.gbnf": "chess.gbnf",
    "gbnf_grammars/transformers-CFG/balanced_parentheses.ebnf": "balanced_parentheses.ebnf",
    "gbnf_grammars/transformers-CFG/geo_query.ebnf": "geo_query.ebnf",
    "cars_grammar_tasks/fuzzing/json.lark": "cars_json.lark",
    "cars_grammar_tasks/SLIA/firstname.ebnf": "slia_firstname.ebnf",
    # Lark's own grammar (lark-parser, MIT), as vendored in llguidance's samples
    "gbnf_grammars/llguidance_samples/lark.lark": "lark.lark",
}


def main() -> int:
    if not SRC.exists():
        print(f"missing {SRC}", file=sys.stderr)
        return 1
    DST.mkdir(parents=True, exist_ok=True)
    for src, dst in COPY.items():
        shutil.copyfile(SRC / src, DST / dst)
    gold = []
    for line in (SRC / "spider" / "dev_gold.sql").read_text().splitlines():
        if line.strip():
            gold.append(line.split("\t")[0])
    with gzip.open(DST / "spider_dev_gold.txt.gz", "wt") as f:
        f.write("\n".join(gold) + "\n")
    mols = []
    files = sorted((SRC / "smiles" / "molecule_sets").glob("*.txt"))
    files.append(SRC / "smiles" / "genlm" / "GDB17_sample.txt")
    for p in files:
        mols.extend(x.strip() for x in p.read_text().splitlines() if x.strip())
    with gzip.open(DST / "smiles_molecules.txt.gz", "wt") as f:
        f.write("\n".join(mols) + "\n")
    print(f"{len(gold)} gold queries, {len(mols)} molecules, {len(COPY)} grammars -> {DST}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
