#!/usr/bin/env node
import '../dist/tools/tidemark-config.js';
