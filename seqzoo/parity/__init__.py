"""Weight / config / cache maps from the official implementations (xlstm, recurrentgemma, Orchid) to seqzoo."""
