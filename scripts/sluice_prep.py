#!/usr/bin/env python3
"""sluice-prep: turn raw data into sluice's on-disk dataset format (docs/format.md).

Subcommands:
  kg         knowledge-graph triples with train/valid/test files (FB15k-237 layout)
  edges      an edge list (CSV/TSV/space; header optional; int or string ids; relation and
             weight columns optional) for link prediction, split by ratio
  planetoid  Planetoid node-classification pickles (Cora, CiteSeer, PubMed)
  ogb        an OGB node-property folder (raw/edge.csv.gz, node-feat, node-label, split/)
  npy        node features and labels as .npy files with an edge list
  gen-nc     a generated node-classification graph with planted classes
  criteo     Criteo TSV click logs (label, 13 integer, 26 hex categorical features)
  avazu      Avazu CSV click logs (22 categorical features, no dense ones)
  movielens  MovieLens-100k ratings as clicks (rating >= 4)
  gen-graph  write a large synthetic power-law edge list (streamed)
  gen-clicks write a Zipf-skewed click log with a planted ground truth (streamed)
  layout     a click log with each table's rows numbered by descending count (hot rows first)

Every output is written to <out>.tmp-<pid> and renamed into place only when complete.
Errors are one line, 'sluice-prep: error: ...', and exit status 1.
"""
import argparse
import pathlib
import signal
import sys

# Debian's numpy lives under /usr/bin/python3; the first python3 on PATH may lack it.
try:
    import numpy  # noqa: F401
except ImportError:
    if sys.executable != "/usr/bin/python3" and pathlib.Path("/usr/bin/python3").exists():
        import os
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    sys.exit("sluice-prep: error: numpy is missing (run scripts/install_deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from sluice_prep.writer import PrepError  # noqa: E402


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output dataset directory")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.add_argument("--partitions", type=int, default=1,
                   help="node partitions (contiguous id ranges) for out-of-core training (default 1)")
    p.add_argument("--partitioning", choices=("random", "degree"), default="random",
                   help="random: a seeded permutation; degree: by descending degree so hot rows "
                        "cluster (default random)")
    p.add_argument("--seed", type=int, default=0, help="seed of renumbering and splits (default 0)")
    p.add_argument("--on-error", choices=("stop", "skip"), default="stop",
                   help="on a malformed line: stop with file:line, or skip and count (default stop)")
    p.add_argument("--name", help="dataset name in the manifest (default: from the input)")


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line, `sluice-prep: error: ...`, like every other error (exit 2)."""

    def error(self, message: str):
        command = self.prog.split(" ", 1)[1] + " " if " " in self.prog else ""
        self.exit(2, f"sluice-prep: error: {message} (see sluice-prep {command}--help)\n")


def main(argv=None) -> int:
    parser = OneLineParser(prog="sluice-prep", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    kg = sub.add_parser("kg", help="knowledge-graph triples with given splits")
    kg.add_argument("input", help="directory with train.txt[.gz], valid.txt[.gz], test.txt[.gz] "
                                  "(head<TAB>relation<TAB>tail) and optionally entities.dict and "
                                  "relations.dict (id<TAB>name); without dictionaries ids come from "
                                  "the union of the splits")
    common(kg)

    e = sub.add_parser("edges", help="an edge list, split by ratio")
    e.add_argument("input", help="edge list file (.gz allowed)")
    e.add_argument("--delimiter", default="auto",
                   help="field separator: auto (tab, comma or semicolon if present, else spaces), "
                        "or a character")
    e.add_argument("--header", choices=("auto", "yes", "no"), default="auto",
                   help="whether the first line is a header (auto: when a column is numeric on the "
                        "second line but not on the first; all-text files need yes)")
    e.add_argument("--src-col", type=int, default=0, help="0-based column of the source id")
    e.add_argument("--dst-col", type=int, default=1, help="0-based column of the destination id")
    e.add_argument("--rel-col", type=int, help="column of the relation (any text); none by default")
    e.add_argument("--weight-col", type=int, help="column of a numeric edge weight; none by default")
    e.add_argument("--ids", choices=("auto", "int", "str"), default="auto",
                   help="node ids are integers (kept as nodes.original_ids) or strings (kept as "
                        "nodes.names); auto looks at the first data line")
    e.add_argument("--comment", default="#%",
                   help="characters that start a comment line, skipped and counted (default '#%%': "
                        "SNAP and KONECT files); '' for none")
    e.add_argument("--self-loops", choices=("keep", "drop"), default="keep",
                   help="keep edges from a node to itself (default) or drop them; either way they "
                        "are counted in the manifest's stats")
    e.add_argument("--valid-frac", type=float, default=0.0, help="fraction of edges for validation")
    e.add_argument("--test-frac", type=float, default=0.0, help="fraction of edges for test")
    e.add_argument("--undirected", action="store_true",
                   help="each line is an undirected edge: drawn into a split once and stored there "
                        "in both directions (for files that list each pair once)")
    common(e)

    pl = sub.add_parser("planetoid", help="Planetoid pickles for node classification (or link "
                                          "prediction on the citation graph)")
    pl.add_argument("input", help="directory with ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}")
    pl.add_argument("--dataset", required=True, help="the <name> in the file names, e.g. cora")
    pl.add_argument("--task", choices=("node", "link"), default="node",
                    help="node: node classification with Planetoid's splits (default); link: the "
                         "citation graph alone for link prediction, each undirected edge drawn "
                         "into a split once and stored in both directions")
    pl.add_argument("--valid-frac", type=float, default=0.05,
                    help="--task link: fraction of undirected edges for validation (default 0.05)")
    pl.add_argument("--test-frac", type=float, default=0.10,
                    help="--task link: fraction of undirected edges for test (default 0.10)")
    pl.add_argument("--feature-dtype", choices=("float32", "float16"), default="float32",
                    help="stored feature type (default float32)")
    common(pl)

    og = sub.add_parser("ogb", help="an OGB-style node-property folder")
    og.add_argument("input", help="folder with raw/{edge,node-feat,node-label}.csv[.gz] and "
                                  "split/<scheme>/{train,valid,test}.csv[.gz]")
    og.add_argument("--feature-dtype", choices=("float32", "float16"), default="float32",
                    help="stored feature type (default float32)")
    common(og)

    npy = sub.add_parser("npy", help="features and labels as .npy with an edge list")
    npy.add_argument("--edges", required=True, help="edge list of node ids in [0, N)")
    npy.add_argument("--features", required=True, help="N x F float .npy (memory-mapped)")
    npy.add_argument("--labels", required=True, help="N integer .npy (-1: unlabelled)")
    npy.add_argument("--valid-frac", type=float, default=0.1, help="fraction of nodes for validation")
    npy.add_argument("--test-frac", type=float, default=0.1, help="fraction of nodes for test")
    npy.add_argument("--feature-dtype", choices=("float32", "float16"), default="float32",
                     help="stored feature type (default float32)")
    common(npy)

    gn = sub.add_parser("gen-nc", help="a generated node-classification graph")
    gn.add_argument("--nodes", type=int, required=True, help="number of nodes")
    gn.add_argument("--edges", type=int, required=True, help="number of edges (self-loops dropped)")
    gn.add_argument("--features", type=int, default=64, help="feature width (default 64)")
    gn.add_argument("--classes", type=int, default=8, help="number of classes (default 8)")
    gn.add_argument("--homophily", type=float, default=0.7,
                    help="probability an edge stays inside its source's class (default 0.7)")
    gn.add_argument("--noise", type=float, default=2.0,
                    help="std of the Gaussian noise around class centroids (default 2.0)")
    gn.add_argument("--feature-dtype", choices=("float32", "float16"), default="float32",
                    help="stored feature type (default float32)")
    gn.add_argument("--train-frac", type=float, default=0.8,
                    help="fraction of nodes in the train split (default 0.8)")
    gn.add_argument("--valid-frac", type=float, default=0.1,
                    help="fraction of nodes in the validation split (default 0.1)")
    gn.add_argument("--test-frac", type=float, default=0.1,
                    help="fraction of nodes in the test split (default 0.1; the rest is in no split)")
    gn.add_argument("--undirected", action="store_true",
                    help="store every edge in both directions (--edges counts undirected edges)")
    common(gn)

    for kind in ("criteo", "avazu"):
        c = sub.add_parser(kind, help=f"{kind} click logs")
        c.add_argument("--train", required=True, help="train file")
        c.add_argument("--valid", help="validation file (optional)")
        c.add_argument("--test", help="test file (optional)")
        c.add_argument("--min-count", type=int, default=0,
                       help="also write per-feature vocabularies of the ids seen at least this "
                            "often in train (0: none; records always keep raw 64-bit ids)")
        c.add_argument("--out", required=True, help="output dataset directory")
        c.add_argument("--overwrite", action="store_true", help="replace an existing output")
        c.add_argument("--on-error", choices=("stop", "skip"), default="stop",
                       help="on a malformed line: stop with file:line, or skip and count")
        c.add_argument("--name", help="dataset name in the manifest")

    ml = sub.add_parser("movielens", help="MovieLens-100k ratings as clicks")
    ml.add_argument("input", help="the ml-100k directory (u1.base, u1.test, u.user, u.item, ...)")
    ml.add_argument("--split", default="u1", help="which <split>.base/<split>.test pair (default u1)")
    ml.add_argument("--side-features", action="store_true",
                    help="add age bucket, gender, occupation and first genre as features")
    ml.add_argument("--out", required=True, help="output dataset directory")
    ml.add_argument("--overwrite", action="store_true", help="replace an existing output")
    ml.add_argument("--on-error", choices=("stop", "skip"), default="stop",
                    help="on a malformed line: stop with file:line, or skip and count")

    g = sub.add_parser("gen-graph", help="write a synthetic power-law edge list")
    g.add_argument("--out", required=True, help="edge list file to write (tab-separated)")
    g.add_argument("--nodes", type=int, required=True, help="number of nodes")
    g.add_argument("--edges", type=int, required=True, help="number of edges")
    g.add_argument("--kind", choices=("marius", "rmat", "community", "kg"), default="marius",
                   help="marius: uniform sources, destinations floor(N*u^5), permuted ids; "
                        "rmat: recursive matrix (0.57, 0.19, 0.19, 0.05); community: power-law "
                        "degrees inside communities of power-law sizes (a degree-corrected "
                        "block model); kg: a sparse knowledge graph shaped like WordNet's (a "
                        "hierarchy, symmetric sibling and cousin relations, domain hubs; "
                        "--relations, default 11; duplicates dropped)")
    g.add_argument("--communities", type=int, default=100, help="community: number of communities")
    g.add_argument("--mixing", type=float, default=0.1,
                   help="community: fraction of edges whose destination ignores the community")
    g.add_argument("--seed", type=int, default=0, help="generator seed")
    g.add_argument("--relations", type=int, default=0,
                   help="add a third column, the relation r<k> with k = destination id mod "
                        "RELATIONS (a planted pattern a knowledge-graph model can learn); "
                        "0: two columns (default); kg: its relation count (default 11)")

    lo = sub.add_parser("layout", help="a click log's rows numbered by descending count")
    lo.add_argument("input", help="a recommendation dataset whose ids are hashed (model.ids: modulo)")
    lo.add_argument("--out", required=True, help="output dataset directory")
    lo.add_argument("--overwrite", action="store_true", help="replace an existing output")

    gc = sub.add_parser("gen-clicks", help="a synthetic click log with a planted model")
    gc.add_argument("--out", required=True, help="output dataset directory")
    gc.add_argument("--samples", type=int, required=True, help="number of samples")
    gc.add_argument("--sparse", type=int, default=26, help="categorical features (default 26)")
    gc.add_argument("--dense", type=int, default=13, help="dense features (default 13)")
    gc.add_argument("--vocab", type=int, default=1000000,
                    help="distinct values per categorical feature (default 1,000,000)")
    gc.add_argument("--alpha", type=float, default=1.05, help="Zipf exponent of the ids (default 1.05)")
    gc.add_argument("--effect-decay", type=float, default=0.0, metavar="R0",
                    help="planted effects of the value of Zipf rank r scale by (1 + r/R0)^-1/2, so rare "
                         "values carry little signal (a log whose ground truth is learnable); "
                         "0: every value's effect has the same scale (default)")
    gc.add_argument("--test-frac", type=float, default=0.1, help="last fraction kept for test")
    gc.add_argument("--seed", type=int, default=0, help="generator seed")
    gc.add_argument("--overwrite", action="store_true", help="replace an existing output")

    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so writers remove their temporary output.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        if args.command == "kg":
            from sluice_prep.kg import convert_kg
            convert_kg(args.input, args.out, args.partitions, args.partitioning, args.seed,
                       args.on_error, args.overwrite, args.name)
        elif args.command == "edges":
            from sluice_prep.edgelist import convert_edges
            convert_edges(args.input, args.out, delimiter=args.delimiter, header=args.header,
                          src_col=args.src_col, dst_col=args.dst_col, rel_col=args.rel_col,
                          weight_col=args.weight_col, ids=args.ids, valid_frac=args.valid_frac,
                          test_frac=args.test_frac, partitions=args.partitions,
                          partitioning=args.partitioning, seed=args.seed, on_error=args.on_error,
                          overwrite=args.overwrite, name=args.name, comment=args.comment,
                          self_loops=args.self_loops, undirected=args.undirected)
        elif args.command == "planetoid" and args.task == "link":
            from sluice_prep.planetoid import convert_planetoid_links
            convert_planetoid_links(args.input, args.dataset, args.out, args.valid_frac,
                                    args.test_frac, args.partitions, args.partitioning, args.seed,
                                    args.overwrite)
        elif args.command == "planetoid":
            from sluice_prep.planetoid import convert_planetoid
            convert_planetoid(args.input, args.dataset, args.out, args.partitions,
                              args.partitioning, args.seed, args.feature_dtype, args.overwrite)
        elif args.command == "ogb":
            from sluice_prep.nodeclass import convert_ogb
            convert_ogb(args.input, args.out, args.partitions, args.partitioning, args.seed,
                        args.feature_dtype, args.overwrite, args.name)
        elif args.command == "npy":
            from sluice_prep.nodeclass import convert_npy
            convert_npy(args.edges, args.features, args.labels, args.out, args.valid_frac,
                        args.test_frac, args.partitions, args.partitioning, args.seed,
                        args.feature_dtype, args.overwrite, args.name)
        elif args.command == "gen-nc":
            from sluice_prep.nodeclass import generate_node_classification
            generate_node_classification(args.out, args.nodes, args.edges, args.features,
                                         args.classes, args.homophily, args.noise, args.partitions,
                                         args.partitioning, args.seed, args.overwrite,
                                         args.feature_dtype, args.train_frac, args.valid_frac,
                                         args.test_frac, args.undirected)
        elif args.command in ("criteo", "avazu"):
            from sluice_prep.recsys import convert_clicks
            files = {s: pathlib.Path(getattr(args, s)) for s in ("train", "valid", "test")
                     if getattr(args, s)}
            convert_clicks(args.command, files, args.out, args.on_error, args.min_count,
                           args.overwrite, args.name or args.command)
        elif args.command == "movielens":
            from sluice_prep.recsys import convert_movielens
            convert_movielens(args.input, args.out, args.split, args.on_error, args.overwrite,
                              args.side_features)
        elif args.command == "gen-clicks":
            from sluice_prep.gen_clicks import generate_clicks
            generate_clicks(args.out, args.samples, args.sparse, args.dense, args.vocab, args.alpha,
                            args.test_frac, args.seed, args.overwrite, args.effect_decay)
        elif args.command == "layout":
            from sluice_prep.layout import layout_by_frequency
            layout_by_frequency(args.input, args.out, args.overwrite)
        elif args.command == "gen-graph":
            from sluice_prep.generate import write_edge_list
            write_edge_list(args.out, args.kind, args.nodes, args.edges, args.seed, args.relations,
                            args.communities, args.mixing)
    except PrepError as e:
        print(f"sluice-prep: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sluice-prep: interrupted; no output was written", file=sys.stderr)
        return 130
    except OSError as e:  # a full disk, a read-only or missing output folder: no traceback
        where = e.filename or getattr(args, "out", None) or "sluice-prep"
        print(f"sluice-prep: error: {where}: {e.strerror or e}; no output was written",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
