#!/usr/bin/env node
import '../dist/lib/cli/tidemark.js';
