module.exports = {};  // never called: only the Publisher creates moray clients
