#!/usr/bin/env node
import '../dist/tools/bench/tidemark-bench.js';
